// Finding the file to execute for "prog", the way execvp() would.
//
// Why not just call execvp() in the child: the launcher is multithreaded (the
// store server has its own thread), and between fork() and exec() a child may
// only call async-signal-safe functions; execvp() is not one (it builds
// strings while walking PATH). So the launcher walks PATH before forking and
// the child calls plain execve(). Doing it up front also lets plexus-run say
// "cannot execute 'foo'" once, before any rank has started.
#pragma once

#include <string>

namespace plexus::run {

// Resolves program against path_env (the value of $PATH; "" or unset means
// the libc default) into *resolved. A program containing '/' is taken as is.
// Returns 0 or the errno execvp() would have failed with (ENOENT when found
// nowhere, EACCES when found only without execute permission, ...).
int ResolveProgram(const std::string& program, const char* path_env, std::string* resolved);

}  // namespace plexus::run
