// ucp_exchange_floor: what a 2-rank 8-byte allreduce costs on raw UCP, and
// how that grows with the work a program does between two of them.
//
//   plexus-run -n 2 ucp_exchange_floor --dir DIR [-n ITERS] [--work-ns 0,60,120,...]
//                                      [--bytes 8,512,4096,...]
//
// Each rank (RANK / PLEXUS_RANK from the launcher, 0 or 1) creates a UCP
// context and worker (tag matching, UCX's defaults from the environment),
// publishes its worker address as a file in DIR (an empty directory both
// ranks see) and reads its peer's. Then, per --bytes value B (default 8) and
// --work-ns value W, blocks of ITERS iterations of: post a receive of B/4
// floats, send B/4 floats, progress until both complete, add them, then
// busy-wait W ns (a stand-in for the software a library runs between two
// collectives). Rank 0 prints the median time per iteration over 5 blocks.
// (B beyond 64 shows where UCX changes protocol: run it with the backend's
// UCX_RNDV_THRESH=1m to see what a one-host Plexus communicator gets.) Nothing of Plexus is
// involved: this is the floor a UCX backend stands on (see backends/ucx/README.md, Performance).
//
// Exit status: 0 done (and every sum right), 1 a UCX error or a wrong sum,
// 2 bad arguments.
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string dir;
  long iters = 200000;
  std::vector<long> work_ns = {0, 60, 120, 250, 500};
  std::vector<long> bytes = {8};
};

const char kUsage[] =
    "usage: plexus-run -n 2 ucp_exchange_floor --dir DIR [-n ITERS] [--work-ns 0,60,...]\n"
    "                                          [--bytes 8,512,...]\n"
    "Raw UCP, no Plexus: a 2-rank exchange + sum of --bytes bytes of float32\n"
    "(default 8; multiples of 4, at most 64 MiB) in a loop, with --work-ns\n"
    "nanoseconds of busy work between iterations (default 0,60,120,250,500), ITERS\n"
    "iterations per block (default 200000), 5 blocks per value; rank 0 prints the\n"
    "median time per iteration. DIR: an empty directory both ranks see, where they\n"
    "publish their UCP worker addresses.\n";

int Usage(const char* why) {
  std::fprintf(stderr, "ucp_exchange_floor: %s\n%s", why, kUsage);
  return 2;
}

bool ParseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    if (a == "--dir") {
      o->dir = v;
    } else if (a == "-n") {
      o->iters = std::atol(v.c_str());
      if (o->iters < 1) return false;
    } else if (a == "--work-ns") {
      o->work_ns.clear();
      std::stringstream list(v);
      for (std::string item; std::getline(list, item, ',');) {
        o->work_ns.push_back(std::atol(item.c_str()));
        if (o->work_ns.back() < 0) return false;
      }
    } else if (a == "--bytes") {
      o->bytes.clear();
      std::stringstream list(v);
      for (std::string item; std::getline(list, item, ',');) {
        const long b = std::atol(item.c_str());
        if (b < 4 || b % 4 != 0 || b > (64L << 20)) return false;
        o->bytes.push_back(b);
      }
    } else {
      return false;
    }
  }
  return !o->dir.empty() && !o->work_ns.empty() && !o->bytes.empty();
}

int RankFromEnv() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return -1;
}

void SpinFor(long ns) {
  if (ns == 0) return;
  const auto until = Clock::now() + std::chrono::nanoseconds(ns);
  while (Clock::now() < until) {
  }
}

// Progresses until the request (null: completed at once) completes.
bool Finish(ucp_worker_h worker, void* request) {
  if (!request) return true;
  if (UCS_PTR_IS_ERR(request)) return false;
  ucs_status_t s;
  while ((s = ucp_request_check_status(request)) == UCS_INPROGRESS) ucp_worker_progress(worker);
  ucp_request_free(request);
  return s == UCS_OK;
}

// The peer's worker address, once its file appears (written under a
// temporary name and renamed, so it is never read half written); 60 s at most.
bool ReadPeerAddress(const std::string& path, std::vector<char>* out) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (access(path.c_str(), R_OK) != 0) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::ifstream in(path, std::ios::binary);
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !out->empty();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseOptions(argc, argv, &o)) return Usage("bad arguments");
  const int rank = RankFromEnv();
  if (rank != 0 && rank != 1) return Usage("needs RANK 0 or 1 (run it under plexus-run -n 2)");

  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return 1;
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h context = nullptr;
  const ucs_status_t init = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (init != UCS_OK) return 1;
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  if (ucp_worker_create(context, &wparams, &worker) != UCS_OK) return 1;

  ucp_address_t* address = nullptr;
  size_t address_len = 0;
  if (ucp_worker_get_address(worker, &address, &address_len) != UCS_OK) return 1;
  const std::string mine = o.dir + "/worker" + std::to_string(rank);
  {
    std::ofstream out(mine + ".tmp", std::ios::binary);
    out.write(reinterpret_cast<const char*>(address), std::streamsize(address_len));
  }
  std::rename((mine + ".tmp").c_str(), mine.c_str());
  ucp_worker_release_address(worker, address);
  std::vector<char> peer_address;
  if (!ReadPeerAddress(o.dir + "/worker" + std::to_string(1 - rank), &peer_address)) {
    std::fprintf(stderr, "rank %d: no peer address in %s within 60 s\n", rank, o.dir.c_str());
    return 1;
  }
  ucp_ep_params_t eparams{};
  eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  eparams.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  ucp_ep_h ep = nullptr;
  if (ucp_ep_create(worker, &eparams, &ep) != UCS_OK) return 1;

  // Element i: rank + 1 + (i % 7) on each rank, so the sum is 3 + 2 (i % 7).
  const long most = *std::max_element(o.bytes.begin(), o.bytes.end()) / 4;
  const size_t most_count = size_t(most);
  std::vector<float> in(most_count), got(most_count), sum(most_count);
  for (long i = 0; i < most; ++i) in[size_t(i)] = float(rank + 1 + i % 7);
  size_t count = 0;
  uint64_t tag = 0;
  bool right = true;
  ucp_request_param_t none{};
  auto exchange = [&] {
    void* recv = ucp_tag_recv_nbx(worker, got.data(), count * 4, tag, ~uint64_t{0}, &none);
    void* send = ucp_tag_send_nbx(ep, in.data(), count * 4, tag, &none);
    ++tag;
    const bool ok = Finish(worker, send) && Finish(worker, recv);
    for (size_t i = 0; i < count; ++i) sum[i] = in[i] + got[i];
    right = right && ok && sum[0] == 3.0f && sum[count - 1] == float(3 + 2 * ((count - 1) % 7));
  };

  for (long bytes : o.bytes) {
    count = size_t(bytes / 4);
    // Warm-up: endpoints wired, caches hot.
    for (long k = 0; k < std::min(10000L, o.iters); ++k) exchange();
    for (long work : o.work_ns) {
      std::vector<double> blocks;
      for (int b = 0; b < 5; ++b) {
        const auto start = Clock::now();
        for (long k = 0; k < o.iters; ++k) {
          exchange();
          SpinFor(work);
        }
        blocks.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                         double(o.iters));
      }
      std::sort(blocks.begin(), blocks.end());
      if (rank == 0) {
        std::printf(
            "work %5ld ns between exchanges: %.3f us per %ld-byte exchange+sum (median of 5 "
            "blocks of %ld; min %.3f)\n",
            work, blocks[2], bytes, o.iters, blocks[0]);
        std::fflush(stdout);
      }
    }
  }
  exchange();  // the last one: neither rank closes its endpoint while the peer still sends

  ucp_request_param_t close{};
  close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  close.flags = UCP_EP_CLOSE_FLAG_FORCE;
  (void)Finish(worker, ucp_ep_close_nbx(ep, &close));
  ucp_worker_destroy(worker);
  ucp_cleanup(context);
  if (!right) std::fprintf(stderr, "rank %d: a sum was wrong or a transfer failed\n", rank);
  return right ? 0 : 1;
}
