// runProgram: run an external program (CNI plugins, iproute2) with fork/exec,
// feed it stdin and capture stdout and stderr.
//
// Thread safety: runProgram is reentrant and may be called from any thread; it
// blocks the calling thread until the child exits or the timeout expires (the
// child is then SIGKILLed and reaped). It never raises SIGPIPE: stdin is a
// socketpair written with MSG_NOSIGNAL.
#pragma once

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace knap::runtime {

struct ProgramResult {
  int exit_code = -1;  // exit status; 128+N when killed by signal N
  std::string stdout_text;
  std::string stderr_text;
};

struct ProgramOptions {
  // Full environment of the child ("K=V"). Empty: inherit knapd's environment.
  std::vector<std::string> env;
  std::string stdin_text;  // written to the child's stdin, then EOF
  Duration timeout = std::chrono::seconds(30);
  size_t max_output = 4 << 20;  // each stream is truncated beyond this
};

// Runs argv[0] (an absolute path, or a name looked up in PATH) with argv.
// Returns the result for any exit status (a nonzero exit is NOT an error here);
// kInvalidArgument for an empty argv, kNotFound when the program cannot be
// started, kDeadlineExceeded when it ran longer than options.timeout (it is
// killed), kInternal for pipe/spawn failures.
StatusOr<ProgramResult> runProgram(const std::vector<std::string>& argv, const ProgramOptions& options,
                                   const TimeSource& time);

// "ip netns add x" style one-liners: runs the program and converts a nonzero
// exit into kInternal carrying the program's stderr. Returns stdout.
StatusOr<std::string> runChecked(const std::vector<std::string>& argv, const ProgramOptions& options,
                                 const TimeSource& time);

}  // namespace knap::runtime
