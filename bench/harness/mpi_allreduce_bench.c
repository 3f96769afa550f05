/* mpi_allreduce_bench: raw MPI_Allreduce (float32, sum), timed the way
 * plexus-bench times a collective, so bench/compare can set the two side by
 * side (the "same library used directly" row of DESIGN.md).
 *
 *   mpirun -np 2 --mca pml ob1 --mca btl tcp,self mpi_allreduce_bench \
 *       [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [--json FILE]
 *
 * Per size (bytes of one rank's buffer, out of place): WARMUP untimed calls,
 * MPI_Barrier, ITERS back-to-back blocking MPI_Allreduce calls timed with
 * MPI_Wtime, the per-rank average reduced with MPI_MAX, then (-c 1) one call
 * on inputs whose sum is exact, whose wrong elements are counted on every
 * rank and summed. Rank 0 prints nccl-tests-style rows and, with --json,
 * writes them in plexus-bench's JSON schema (in_place is null).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct Row {
  unsigned long long size;
  double time_us, algbw, busbw;
  long long wrong; /* -1: not checked */
};

static unsigned long long ParseSize(const char* s, int* ok) {
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  *ok = end != s;
  if (*ok && *end) {
    switch (*end) {
      case 'K':
      case 'k':
        v <<= 10;
        break;
      case 'M':
      case 'm':
        v <<= 20;
        break;
      case 'G':
      case 'g':
        v <<= 30;
        break;
      default:
        *ok = 0;
    }
    if (*ok && end[1]) *ok = 0;
  }
  return v;
}

static void Usage(void) {
  fprintf(stderr,
          "usage: mpi_allreduce_bench [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] "
          "[-w WARMUP] [-c 0|1] [--json FILE]\n");
}

static int WriteJson(const char* path, const char* version, int ranks, const struct Row* rows,
                     int nrows, int iters, int warmup, int check) {
  FILE* f = fopen(path, "w");
  if (!f) {
    perror(path);
    return 1;
  }
  fprintf(f, "{\n  \"tool\": \"mpi_allreduce_bench\",\n  \"backend\": \"mpi-raw\",\n");
  fprintf(f, "  \"backend_version\": \"");
  for (const char* p = version; *p && *p != '\n'; ++p) {
    if (*p == '"' || *p == '\\') fputc('\\', f);
    if ((unsigned char)*p >= 0x20) fputc(*p, f);
  }
  fprintf(f, "\",\n  \"ranks\": %d,\n  \"collective\": \"allreduce\",\n", ranks);
  fprintf(f, "  \"timing\": \"blocking\",\n  \"iters\": %d,\n  \"warmup_iters\": %d,\n", iters,
          warmup);
  fprintf(f, "  \"check\": %s,\n  \"complete\": true,\n  \"rows\": [", check ? "true" : "false");
  for (int i = 0; i < nrows; ++i) {
    const struct Row* r = &rows[i];
    fprintf(f,
            "%s\n    {\"size\": %llu, \"count\": %llu, \"type\": \"float32\", "
            "\"redop\": \"sum\", \"root\": -1, \"out_of_place\": {\"time_us\": %.9g, "
            "\"algbw_gbs\": %.9g, \"busbw_gbs\": %.9g, \"wrong\": ",
            i ? "," : "", r->size, r->size / 4, r->time_us, r->algbw, r->busbw);
    if (r->wrong < 0) {
      fprintf(f, "null");
    } else {
      fprintf(f, "%lld", r->wrong);
    }
    fprintf(f, "}, \"in_place\": null}");
  }
  fprintf(f, "\n  ]\n}\n");
  return fclose(f) == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  unsigned long long min_bytes = 8, max_bytes = 64ull << 20, factor = 2;
  int iters = 20, warmup = 5, check = 1;
  const char* json = NULL;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    int ok = i + 1 < argc;
    const char* v = ok ? argv[i + 1] : "";
    if (!strcmp(a, "-b")) {
      min_bytes = ParseSize(v, &ok);
    } else if (!strcmp(a, "-e")) {
      max_bytes = ParseSize(v, &ok);
    } else if (!strcmp(a, "-f")) {
      factor = ParseSize(v, &ok);
      ok = ok && factor >= 2;
    } else if (!strcmp(a, "-n")) {
      iters = atoi(v);
      ok = ok && iters >= 1;
    } else if (!strcmp(a, "-w")) {
      warmup = atoi(v);
      ok = ok && warmup >= 0;
    } else if (!strcmp(a, "-c")) {
      check = atoi(v);
    } else if (!strcmp(a, "--json")) {
      json = v;
    } else {
      ok = 0;
    }
    if (!ok || min_bytes > max_bytes) {
      Usage();
      return 2;
    }
    ++i;
  }

  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int version_len = 0;
  MPI_Get_library_version(version, &version_len);

  const size_t max_count = (size_t)(max_bytes / 4);
  float* send = malloc(max_count * 4 + 4);
  float* recv = malloc(max_count * 4 + 4);
  struct Row* rows = calloc(64, sizeof *rows);
  if (!send || !recv || !rows) {
    fprintf(stderr, "mpi_allreduce_bench: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(send, 0, max_count * 4 + 4);
  memset(recv, 0, max_count * 4 + 4);
  const double factor_bus = size > 1 ? 2.0 * (size - 1) / size : 0.0;
  if (rank == 0) {
    printf("# mpi_allreduce_bench: MPI_Allreduce float32 sum, %d rank(s), %.*s\n", size,
           (int)strcspn(version, "\n"), version);
    printf("#       size         count      time     algbw     busbw  #wrong\n");
    printf("#        (B)    (elements)      (us)    (GB/s)    (GB/s)\n");
    fflush(stdout);
  }
  int nrows = 0;
  long long total_wrong = 0;
  for (unsigned long long bytes = min_bytes; nrows < 64;) {
    const int count = (int)(bytes / 4);
    for (int i = 0; i < warmup; ++i) {
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double local = (MPI_Wtime() - t0) / iters, seconds = 0;
    MPI_Allreduce(&local, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    struct Row* r = &rows[nrows++];
    r->size = (unsigned long long)count * 4;
    r->time_us = seconds * 1e6;
    r->algbw = seconds > 0 ? (double)r->size / seconds / 1e9 : 0.0;
    r->busbw = r->algbw * factor_bus;
    r->wrong = -1;
    if (check) {
      /* Small integers: every partial sum is exact in float32. */
      for (int i = 0; i < count; ++i) send[i] = (float)((i * 7) % 13 + rank);
      for (int i = 0; i < count; ++i) recv[i] = -1.0f;
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      long long wrong = 0, sum = 0;
      for (int i = 0; i < count; ++i) {
        const float want = (float)(size * ((i * 7) % 13) + size * (size - 1) / 2);
        wrong += recv[i] != want;
      }
      MPI_Allreduce(&wrong, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
      r->wrong = sum;
      total_wrong += sum;
    }
    if (rank == 0) {
      char wrong_text[32] = "N/A";
      if (r->wrong >= 0) snprintf(wrong_text, sizeof wrong_text, "%lld", r->wrong);
      printf("%12llu  %12llu  %8.2f  %8.3f  %8.3f  %6s\n", r->size, r->size / 4, r->time_us,
             r->algbw, r->busbw, wrong_text);
      fflush(stdout);
    }
    if (bytes > max_bytes / factor) break;
    bytes *= factor;
  }
  int rc = total_wrong == 0 ? 0 : 1;
  if (rank == 0) {
    printf("# Out of bounds values : %lld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
    fflush(stdout);
    if (json && WriteJson(json, version, size, rows, nrows, iters, warmup, check) != 0) rc = 1;
  }
  free(rows);
  free(send);
  free(recv);
  MPI_Finalize();
  return rc;
}
