// The ranks' starts: RunStart is one (store, node group, environments, job),
// in named steps; RunStarts starts them again after a failure.
#include "starts.hpp"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher.hpp"
#include "mark_reader.hpp"
#include "network_address.hpp"
#include "node_group.hpp"
#include "node_join.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/settings/environment.hpp"
#include "stall_report.hpp"
#include "store/job_token.hpp"
#include "store/store_protocol.hpp"

extern char** environ;

namespace plexus::run {
namespace {

// --bind-to core: rank i's CPU, the i-th of those this process may use; none
// (an empty list) with more ranks than CPUs, as mpirun refuses to bind then.
std::vector<int> RankCpus(int ranks) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  if (cpus.empty() || size_t(ranks) > cpus.size()) {
    std::fprintf(stderr,
                 "plexus-run: --bind-to core: %d ranks on %zu CPUs here; not binding them\n", ranks,
                 cpus.size());
    return {};
  }
  cpus.resize(size_t(ranks));
  return cpus;
}

// How a start of the ranks failed: what kind of failure, job-wide (unset
// where unknown: node 0 gone, or a join that failed), and the line.
struct StartFailure {
  std::optional<FailureKind> kind;
  std::string line;
  int start = 0;         // the start it was (a late node joins node 0's)
  bool sat_out = false;  // this node was not in it (it came late): join the next
};

// The store the ranks meet at: hosted here (node 0, unless --no-store), its
// port in job->master_port; or only its port: --master-port (also node K >
// 0), or with --no-store a free one. False after saying why.
bool StartStore(const Options& opts, const std::string& public_credential, JobInfo* job,
                std::unique_ptr<TcpStoreServer>* server) {
  // The store is up before any rank starts, so ranks only ever connect; its
  // port is free by construction, no bind-close-rebind race.
  if (opts.host_store && opts.node_rank == 0) {
    store::TcpStoreServerOptions server_options;
    server_options.public_credential = public_credential;
    Status status = store::StartTcpStoreServer(
        opts.master_addr, static_cast<uint16_t>(opts.master_port), server_options, server);
    if (!status.ok() || *server == nullptr) {
      std::fprintf(stderr, "plexus-run: cannot host the rendezvous store on %s:%d: %s\n",
                   opts.master_addr.c_str(), opts.master_port,
                   status.ok() ? "no server returned" : status.ToString().c_str());
      return false;
    }
    job->master_port = (*server)->port();
  } else if (opts.master_port != 0) {
    job->master_port = static_cast<uint16_t>(opts.master_port);  // also: node K > 0
  } else if (std::string error; !PickFreePort(opts.master_addr, &job->master_port, &error)) {
    std::fprintf(stderr, "plexus-run: cannot pick a free port: %s\n", error.c_str());
    return false;
  }
  return true;
}

// What every rank of a start runs and how: prog, --grace, --timeout,
// --no-prefix, --bind-to and PLEXUS_TRACE_DIR.
LaunchConfig BaseLaunchConfig(const Options& opts) {
  LaunchConfig config;
  config.argv = opts.argv;
  config.grace = opts.grace;
  config.timeout = opts.timeout;
  config.prefix_output = opts.prefix_output;
  if (opts.bind_to_core) config.rank_cpu = RankCpus(opts.nproc);
  if (const char* dir = plexus::settings::Raw(plexus::settings::Id::kTraceDir); dir && *dir) {
    config.trace_dir = dir;
  }
  return config;
}

// plexus-run's own environment, which every rank inherits, with the job's
// PLEXUS_JOB_ID where the caller gave none.
std::vector<std::string> BaseEnvironment(const NodeGroup* group) {
  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) base_env.emplace_back(*e);
  // The job's name in the ranks' flight-recorder dumps, which plexus-trace
  // checks are of one job: fresh for each start (across hosts node 0's).
  if (!plexus::settings::Raw(plexus::settings::Id::kJobId)) {
    std::string id;
    if (group && !group->job_id().empty()) {
      id = group->job_id();
    } else if (!group) {
      std::string error;  // (without randomness the dumps go without a job id)
      (void)store::RandomHex(8, &id, &error);
    }
    if (!id.empty()) base_env.push_back("PLEXUS_JOB_ID=" + id);
  }
  return base_env;
}

// Each rank's environment (rank_environment.hpp) into config->rank_env; with
// --elastic also PLEXUS_ELASTIC and the rank's identity key. False after
// saying why.
bool AddRankEnvironments(const Options& opts, const JobInfo& job,
                         const std::vector<std::string>& base_env, LaunchConfig* config) {
  config->rank_env.reserve(opts.nproc);
  for (int rank = 0; rank < opts.nproc; ++rank) {
    config->rank_env.push_back(BuildRankEnvironment(base_env, job, rank));
    if (opts.elastic) {
      config->rank_env.back().push_back("PLEXUS_ELASTIC=1");
      // The key the rank claims its store identity with: a rank started
      // again gets it back (no other process may claim it meanwhile).
      std::string key, error;
      if (!store::RandomHex(32, &key, &error)) {
        std::fprintf(stderr, "plexus-run: --elastic: %s\n", error.c_str());
        return false;
      }
      config->rank_env.back().push_back("PLEXUS_RANK_KEY=" + key);
    }
  }
  return true;
}

// --elastic: who is left, said under node 0's own keys (no other process
// may write them), where Communicator::shrink() reads it. False after saying
// why.
bool SetUpElastic(const Options& opts, const JobInfo& job, LaunchConfig* config) {
  store::TcpStoreClientOptions options;
  options.identity = "node/0";
  options.label = "plexus-run --elastic, pid " + std::to_string(long(getpid()));
  std::unique_ptr<RendezvousStore> client;
  Status st = store::ConnectTcpStoreWithOptions(opts.master_addr, job.master_port,
                                                std::chrono::seconds(5), options, &client);
  if (!st.ok()) {
    std::fprintf(stderr, "plexus-run: --elastic: cannot connect to its own store: %s\n",
                 st.ToString().c_str());
    return false;
  }
  std::shared_ptr<RendezvousStore> members_client = std::move(client);
  config->elastic = true;
  config->rejoins = opts.max_restarts;
  config->publish_members = [members_client](uint64_t generation, const std::vector<int>& left) {
    std::string value = std::to_string(generation);
    for (int r : left) value += " " + std::to_string(r);
    // Each generation under a key of its own, never changed (grow() reads
    // the one the ranks agreed on), and the latest again.
    Status st =
        members_client->Set(store::NodeKey(0, "launch/members/" + std::to_string(generation)),
                            Bytes(value.begin(), value.end()), std::chrono::seconds(5));
    if (st.ok()) {
      st = members_client->Set(store::NodeKey(0, "launch/members"),
                               Bytes(value.begin(), value.end()), std::chrono::seconds(5));
    }
    if (!st.ok()) {
      std::fprintf(stderr, "plexus-run: --elastic: cannot tell the ranks who is left: %s\n",
                   st.ToString().c_str());
    }
  };
  return true;
}

// With a store: what the ranks marked in it, read once a rank failed (which
// rank the others waited for, whether they posted different collectives) and
// under --elastic (the generation each rank reached).
void ReadMarksFromStore(const Options& opts, const JobInfo& job, const NodeGroup* group,
                        LaunchConfig* config) {
  // Ranks whose collective timed out leave a line and a mark in the store
  // (core/src/stall_report.hpp); from them the report blames the rank that
  // stopped making progress, not the first one to exit, or says that the
  // ranks posted different collectives.
  const int nproc = job.world_size;  // every rank of the job, on every node
  auto reader = std::make_shared<MarkReader>(opts.master_addr, job.master_port);
  config->read_stall_lines = [reader, nproc] {
    std::vector<std::string> lines;
    reader->Read(
        [&](RendezvousStore& store) { lines = detail::StallLines(store, uint32_t(nproc)); });
    return lines;
  };
  // Across nodes the ranks named come with their node and host.
  detail::RankLister list_ranks;
  if (group) {
    list_ranks = [per_node = opts.nproc, hosts = group->hosts()](const std::vector<uint32_t>& r) {
      return NodeRankList(std::vector<int>(r.begin(), r.end()), per_node, hosts);
    };
  }
  // --elastic: the generation each rank has reached (Communicator::shrink
  // and grow mark it); 0 where it marked none.
  config->read_generations = [reader, nproc] {
    std::vector<uint64_t> reached(size_t(nproc), 0);
    reader->Read([&](RendezvousStore& store) {
      for (int r = 0; r < nproc; ++r) {
        Bytes value;
        if (store
                .Get(store::RankKey(uint32_t(r), "elastic/generation"), &value,
                     std::chrono::milliseconds(0))
                .ok()) {
          reached[size_t(r)] =
              std::strtoull(std::string(value.begin(), value.end()).c_str(), nullptr, 10);
        }
      }
    });
    return reached;
  };
  config->read_stall_mismatch = [reader, nproc, list_ranks] {
    std::string mismatch;
    reader->Read([&](RendezvousStore& store) {
      mismatch = detail::StallMismatch(store, uint32_t(nproc), list_ranks);
    });
    return mismatch;
  };
}

// Across nodes: the ranks here numbered job-wide, each node's host for the
// messages, and failures told to and heard from the other nodes through the
// group, whose helper thread starts here.
void StartNodeGroup(const Options& opts, const JobInfo& job, NodeGroup* g, LaunchConfig* config) {
  // (Nodes are numbered as in this start: with MIN:MAX and a node missing,
  // "node 1" in the ranks' messages is the second node of the start.)
  config->first_rank = job.node_rank * opts.nproc;
  config->node_rank = job.node_rank;
  for (int m : g->members()) config->node_hosts.push_back(g->hosts()[m]);
  config->remote_failure_fd = g->wake_fd();
  config->remote_failure = [g] { return g->Failure(); };
  config->publish_failure = [g](FailureKind kind, const std::string& line) {
    g->ReportLocalFailure(kind, line);
  };
  config->settle_failure = [g] { return g->SettleFailure(); };
  g->Start();
}

// After the ranks here ended, across nodes: the job is done only when every
// node's ranks are; when it failed, *failure gets the job-wide verdict, and
// node 0 the ranks' flight-recorder dumps. Leaves the group. Returns the exit
// code, code or kExitRankFailed.
int FinishAcrossNodes(const Options& opts, const LaunchConfig& config, int code, NodeGroup* group,
                      StartFailure* failure) {
  if (code == kExitOk) {
    // The ranks here are done; the job is not until every node's are.
    std::string failure = group->FinishOk();
    if (!failure.empty()) {
      std::fprintf(stderr, "plexus-run: %s; the %d rank%s on node %d had finished\n",
                   failure.c_str(), opts.nproc, opts.nproc == 1 ? "" : "s", opts.node_rank);
      code = kExitRankFailed;
    }
  }
  if (code != kExitOk) {
    failure->kind = group->VerdictKind();
    failure->line = group->Failure();
  }
  // The ranks' flight-recorder dumps, from every node into node 0's
  // PLEXUS_TRACE_DIR, when the job failed.
  if (code != kExitOk && !config.trace_dir.empty()) {
    const std::string collected = group->ShareTraces(config.trace_dir);
    if (!collected.empty()) std::fprintf(stderr, "plexus-run: node 0: %s\n", collected.c_str());
  }
  group->Leave(code == kExitOk);
  return code;
}

// One start of the ranks (plexus-run starts them again under
// --max-restarts): hosts a store of its own (node 0), joins the other nodes,
// runs the ranks to their end. Returns plexus-run's exit code; *failure
// says what failed here.
int RunStart(const Options& opts, const JobInfo& given_job, const std::string& public_credential,
             StartFailure* failure) {
  JobInfo job = given_job;
  std::unique_ptr<TcpStoreServer> server;
  if (!StartStore(opts, public_credential, &job, &server)) return kExitRankFailed;

  // Across hosts: every launcher joins the others before any rank starts.
  std::unique_ptr<NodeGroup> group;
  if (opts.nnodes > 1) {
    const std::optional<int> code =
        JoinNodes(opts, server.get(), &job, &failure->start, &failure->sat_out, &group);
    if (code) return *code;
  }

  // MASTER_PORT for torch.distributed's env:// rendezvous (its rank 0 hosts a
  // store there): node 0's pick across hosts; else a free port here, racy as
  // torchrun's --standalone (0, on failure: the store's port, as before).
  if (group) {
    job.torch_port = group->torch_port();
  } else if (std::string why; !PickFreePort(opts.master_addr, &job.torch_port, &why)) {
    job.torch_port = 0;
  }
  LaunchConfig config = BaseLaunchConfig(opts);
  const std::vector<std::string> base_env = BaseEnvironment(group.get());
  if (!AddRankEnvironments(opts, job, base_env, &config)) {
    if (server) server->Stop();
    return kExitRankFailed;
  }
  if (opts.elastic && server && !SetUpElastic(opts, job, &config)) {
    server->Stop();
    return kExitRankFailed;
  }
  if (server || group) ReadMarksFromStore(opts, job, group.get(), &config);
  if (group) {
    StartNodeGroup(opts, job, group.get(), &config);
  } else {
    // (across nodes NodeGroup takes the failure to the other nodes)
    config.publish_failure = [failure](FailureKind kind, const std::string& line) {
      failure->kind = kind;
      failure->line = line;
    };
  }

  std::fflush(stdout);  // nothing of ours may be buffered across the ranks' output
  int code = RunJob(config);
  if (group) code = FinishAcrossNodes(opts, config, code, group.get(), failure);
  if (server) server->Stop();
  return code;
}

}  // namespace

// The ranks' starts, and after a failure, up to --max-restarts more: the
// history of what failed each time.
int RunStarts(const Options& opts, JobInfo job, const std::string& public_credential) {
  std::vector<std::string> history;
  for (int restart = 0;; ++restart) {
    job.restart_count = restart;
    StartFailure failure;
    failure.start = restart;
    const int code = RunStart(opts, job, public_credential, &failure);
    restart = failure.start;  // a late node counts from the start it found
    if (failure.sat_out) {
      if (restart >= opts.max_restarts) {
        std::fprintf(stderr,
                     "plexus-run: node %d: no restart is left for this node to join "
                     "(--max-restarts %d)\n",
                     opts.node_rank, opts.max_restarts);
        return code;
      }
      continue;
    }
    if (code == kExitOk) {
      if (restart > 0) {
        std::fprintf(stderr, "plexus-run: the job finished after %d restart%s\n", restart,
                     restart == 1 ? "" : "s");
      }
      return code;
    }
    // A signal to plexus-run, --timeout or prog not executable: not the
    // ranks' failure, and starting them again would not help. Nor a node lost
    // where the job needs every node (--nnodes M; MIN:MAX goes on without
    // it), or a failure of unknown kind.
    if (opts.max_restarts == 0 || opts.elastic || !failure.kind ||
        *failure.kind == FailureKind::kLauncher ||
        (*failure.kind == FailureKind::kNodeLost && opts.min_nodes == opts.nnodes)) {
      return code;
    }
    history.push_back("start " + std::to_string(restart) + ": " + failure.line);
    if (restart == opts.max_restarts) {
      std::string all;
      for (const std::string& h : history) all += "\n  " + h;
      std::fprintf(stderr,
                   "plexus-run: the ranks failed %d time%s, the last after %d restart%s "
                   "(--max-restarts %d); what failed:%s\n",
                   restart + 1, restart == 0 ? "" : "s", restart, restart == 1 ? "" : "s",
                   opts.max_restarts, all.c_str());
      return code;
    }
    if (opts.nnodes > 1) {
      std::fprintf(
          stderr, "plexus-run: node %d: starting its %d ranks again (restart %d of %d) after: %s\n",
          opts.node_rank, opts.nproc, restart + 1, opts.max_restarts, failure.line.c_str());
    } else {
      std::fprintf(stderr, "plexus-run: starting all %d ranks again (restart %d of %d) after: %s\n",
                   opts.nproc, restart + 1, opts.max_restarts, failure.line.c_str());
    }
  }
}

}  // namespace plexus::run
