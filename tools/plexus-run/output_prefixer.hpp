// OutputPrefixer: turns one rank's raw output stream into whole lines that
// start with "[rank] ", written to the launcher's own stdout or stderr.
//
// Why whole lines: N ranks write to N pipes at the same time, and the launcher
// is the only writer of its stdout/stderr. Emitting only complete lines, each
// in one write(), is what keeps "[0] abc" and "[1] xyz" from being spliced
// together mid-line. A rank's bytes are never reordered.
//
// Not thread-safe: one launcher thread owns every prefixer.
#pragma once

#include <cstddef>
#include <string>

namespace plexus::run {

class OutputPrefixer {
 public:
  // A line longer than this is cut and emitted in pieces (each with the prefix),
  // so that a rank printing megabytes without a newline cannot grow the
  // launcher's memory without bound.
  static constexpr size_t kMaxLineBytes = 1u << 20;

  // prefix is written before every line (e.g. "[3] "; may be empty). Does not
  // take ownership of out_fd.
  OutputPrefixer(std::string prefix, int out_fd);

  OutputPrefixer(const OutputPrefixer&) = delete;
  OutputPrefixer& operator=(const OutputPrefixer&) = delete;
  OutputPrefixer(OutputPrefixer&&) = default;
  OutputPrefixer& operator=(OutputPrefixer&&) = default;

  // Appends data and writes out every line it completes. Blocks while out_fd
  // is full (backpressure). Write errors (EPIPE: nobody reads our stdout)
  // make this prefixer drop output from then on; the rank is never blocked.
  void Feed(const char* data, size_t size);

  // Writes a pending partial last line, ending it with '\n' so the next line
  // of another rank starts on a line of its own. Call when the stream ended.
  void Flush();

  // Bytes held back waiting for their newline.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  void Emit(std::string& out, const char* line, size_t size);  // prefix + line + '\n'
  void Write(const std::string& out);

  std::string prefix_;
  int out_fd_;
  std::string pending_;  // start of a line whose '\n' has not arrived yet
  bool broken_ = false;  // out_fd_ failed; drop everything from now on
};

// Writes all of data to fd, retrying on EINTR and short writes and waiting
// for POLLOUT when fd is non-blocking. Returns false on any other error.
bool WriteAll(int fd, const char* data, size_t size);

}  // namespace plexus::run
