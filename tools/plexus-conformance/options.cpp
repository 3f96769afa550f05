#include "options.hpp"
#include "plexus/settings/environment.hpp"

#include <getopt.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace plexus::conformance {
namespace {

constexpr const char* kUsage = R"(Usage: plexus-conformance --backend NAME|PATH [options]

Checks that a Plexus backend plugin keeps the promises of the ABI in
plexus/backend.h, by calling the plugin's function table directly (the host
library would hide a plugin's mistakes). It loads the plugin with the host's
own loader and gives it the host's services, then runs, on every rank:

  table        the table and entry function: sizes, ABI version, name and
               version, required slots, the 1.1 and 1.2 slots, capabilities
               against slots, the exported dynamic symbols of the .so
               (exactly the entry function)
  collectives  every collective of the list (plexus/abi/collectives.def)
               the backend claims x claimed dtype x reduction op x counts 0,
               1, 1009, a large one and one not divisible by the number of
               ranks (the v-collectives: uneven counts, 0 on some ranks,
               blocks out of rank order with gaps left untouched; the buffer
               list: separate buffers and views of one bucket), out of place
               and in the collective's in-place form, every root, send/recv
               in a ring; inputs and exact results follow from each
               collective's traits; send buffers and bytes outside the
               result untouched; count and displacement arrays overwritten as
               soon as the post returns (they are borrowed for the call
               only). A collective not claimed, or not in an older table,
               gets one SKIP line saying why
  requests     barrier waits for the last rank, several requests in flight,
               test() never blocks, wait() with a timeout returns TIMEOUT and
               leaves the request pending, waits from several threads
  arguments    unsupported collectives, dtypes, ops and memory types fail
               with NULL *req_out and an error string; every collective's
               invalid arguments (from its traits: NULL buffers and arrays,
               unknown codes, roots and peers out of range, byte sizes past
               2^62, overlaps other than the in-place form, counts that
               disagree with the arrays, empty or overlapping buffer lists)
               fail with INVALID_ARGUMENT, and then a valid post on the same
               communicator must still work
  groups       comm_split (1.2, when the backend has it) into two groups with
               keys reversing the order, with a rank of no color (NULL
               communicator, OK), into groups of one; comm_create over a
               group's ranks in a permuted order with an out-of-band channel
               over those ranks only (how the host makes groups without
               comm_split; a backend with comm_split may refuse it): two
               groups, a subset leaving a rank out, groups of one; two groups
               sharing ranks used from two threads at once (thread_level
               multiple; made as the host would); on each, an allreduce and a
               broadcast from every group rank, whose data show which process
               each group rank is
  failures     a rank that never posts (timeout), comm_abort from another
               thread, mismatched collectives (also per-rank counts and roots
               that disagree across ranks), and, last, a dead peer whose error must name its rank,
               on a communicator of the whole job and on a group

Results travel to rank 0 through the job's rendezvous store, never through
the backend under test. Rank 0 prints one line per check as it completes,
"PASS|FAIL|SKIP  <check>  <detail>", where a FAIL says which ranks failed
and why, then a summary per collective and capability.

A check during which a rank crashes (a fatal signal, exit(), SIGKILL) or
hangs past every deadline fails with the call into the backend that was in
flight and its arguments, e.g.
  FAIL  arguments: broadcast invalid arguments  rank 2: the process died of
  SIGSEGV during this check, in broadcast(buf=NULL, count 4, int32, root 0,
  placement NULL (host)) (...)
When the suite started the ranks itself, it then starts them again, skips
every check up to and including that one, and goes on to the rest; the
RESULT line counts the checks that crashed or hung. Under a launcher
(mpirun, srun, plexus-run) it cannot start them again: the crash ends the
run, and the report says so.

Launch: started without a launcher (no PLEXUS_RANK, RANK, OMPI_COMM_WORLD_RANK,
SLURM_PROCID or PMI_RANK), it starts itself under `plexus-run -n N` (found next
to this program, else on PATH) and exits with plexus-run's status. Under a
launcher every process is one rank, e.g.
  plexus-conformance --backend tcp -n 4
  mpirun -np 2 plexus-conformance --backend mpi
(under mpirun, set PLEXUS_MASTER_ADDR/PLEXUS_MASTER_PORT so that rank 0 can
host the store; with Open MPI add --mca orte_allowed_exit_without_sync 1 for
the dead-peer check, which mpirun otherwise turns into a killed job).

Options:
  -b, --backend NAME|PATH   the plugin: a name (libplexus-NAME.so, searched like
                            PLEXUS_BACKEND) or a path to the .so (required)
  -n, --nproc N             ranks to start when no launcher is present
                            (default 2; 1 runs the single-rank checks only)
      --timeout SECONDS     timeout_ms of the communicators under test and the
                            bound of every wait of this tool (default
                            $PLEXUS_TIMEOUT, else 30); a backend that does not
                            complete an operation within it plus 5 s fails
      --fault-timeout SECONDS
                            timeout_ms of the communicators of the failure
                            checks (default 1.5); they must fail within 4x it
      --max-count N         the large element count (default 1048576; the
                            per-rank block of allgather, reduce_scatter and
                            alltoall is N / ranks)
      --only PATTERN        run only the checks whose name contains PATTERN
                            (e.g. "allreduce float16", "abort", "table");
                            "A|B" runs those that contain A or B
      --max-restarts N      how many times to start the ranks again after a
                            crash or hang (default 10; 0: a crash ends the
                            run; only when the suite started the ranks)
  -v, --verbose             also print the backend's log lines (stderr); they
                            are hidden by default since the failure checks
                            provoke errors on purpose
  -h, --help                print this help and exit

Exit status: 0 every check passed or was skipped; 1 a check failed; 2 bad
command line, or the suite could not start (no launcher store, plexus-run not
found); when it started the ranks itself, the last plexus-run's status, or 1
when a crash stopped it.
)";

[[noreturn]] void UsageError(const std::string& message) {
  std::fprintf(stderr,
               "plexus-conformance: %s\n"
               "Try 'plexus-conformance --help' for more information.\n",
               message.c_str());
  std::exit(2);
}

double ParsePositiveSeconds(const char* option, const char* text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(v) || v <= 0 || v > 86400) {
    UsageError(std::string("invalid value '") + text + "' for " + option +
               " (expected seconds, more than 0 and at most 86400)");
  }
  return v;
}

uint64_t ParseCount(const char* option, const char* text, uint64_t min, uint64_t max) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < min || v > max) {
    UsageError(std::string("invalid value '") + text + "' for " + option + " (expected " +
               std::to_string(min) + ".." + std::to_string(max) + ")");
  }
  return v;
}

}  // namespace

bool Selects(const Options& options, const std::string& name) {
  if (options.only.empty()) return true;
  size_t from = 0;
  for (;;) {
    const size_t bar = options.only.find('|', from);
    const std::string pattern = options.only.substr(from, bar - from);
    if (!pattern.empty() && name.find(pattern) != std::string::npos) return true;
    if (bar == std::string::npos) return false;
    from = bar + 1;
  }
}

int ParseOptions(int argc, char** argv, Options* out) {
  enum : int { kTimeout = 1000, kFaultTimeout, kMaxCount, kOnly, kMaxRestarts };
  static const option kLong[] = {
      {"backend", required_argument, nullptr, 'b'},
      {"nproc", required_argument, nullptr, 'n'},
      {"timeout", required_argument, nullptr, kTimeout},
      {"fault-timeout", required_argument, nullptr, kFaultTimeout},
      {"max-count", required_argument, nullptr, kMaxCount},
      {"only", required_argument, nullptr, kOnly},
      {"max-restarts", required_argument, nullptr, kMaxRestarts},
      {"verbose", no_argument, nullptr, 'v'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  Options o;
  o.argv.assign(argv, argv + argc);
  // A bad PLEXUS_TIMEOUT leaves the default: the communicators report it.
  if (double seconds = 0; plexus::settings::Value(plexus::settings::Id::kTimeout)) {
    if (std::string why; plexus::settings::ReadNumber(plexus::settings::Id::kTimeout, &seconds, &why)) {
      o.timeout_ms = int64_t(seconds * 1000);
    }
  }
  opterr = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":b:n:vh", kLong, nullptr)) != -1) {
    switch (c) {
      case 'b':
        o.backend = optarg;
        break;
      case 'n':
        o.nproc = uint32_t(ParseCount("-n", optarg, 1, 4096));
        o.nproc_given = true;
        break;
      case kTimeout:
        o.timeout_ms = int64_t(ParsePositiveSeconds("--timeout", optarg) * 1000);
        break;
      case kFaultTimeout:
        o.fault_timeout_ms = int64_t(ParsePositiveSeconds("--fault-timeout", optarg) * 1000);
        break;
      case kMaxCount:
        o.max_count = ParseCount("--max-count", optarg, 1, uint64_t(1) << 30);
        break;
      case kOnly:
        o.only = optarg;
        break;
      case kMaxRestarts:
        o.max_restarts = int(ParseCount("--max-restarts", optarg, 0, 1000));
        break;
      case 'v':
        o.verbose = true;
        break;
      case 'h':
        std::fputs(kUsage, stdout);
        return 0;
      case ':':
        UsageError(std::string("option '") + argv[optind - 1] + "' needs a value");
      default:
        UsageError(std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (optind < argc) UsageError(std::string("unexpected argument '") + argv[optind] + "'");
  if (o.backend.empty()) UsageError("--backend NAME|PATH is required");
  if (o.timeout_ms < 100) o.timeout_ms = 100;
  if (o.fault_timeout_ms < 100) o.fault_timeout_ms = 100;
  *out = std::move(o);
  return -1;
}

}  // namespace plexus::conformance
