// How a backend's worker thread waits for work without taking the core from
// the thread that posts it (OpQueue's worker; the MPI backend's one-host
// runner).
#pragma once

namespace plexus::kit {

// Makes the calling thread SCHED_BATCH while `waiting` (before it sleeps
// for work) and a normal thread again once it has work. A post wakes the
// waiting worker, but the kernel lets a woken batch thread run only when the
// posting thread blocks or its time slice ends, never by preempting it: so a
// caller that posts and then waits (a blocking allreduce) runs the operation
// itself without a switch to the worker and back, while a caller that goes
// on computing still has it run on its core within a time slice. Work runs
// at the normal policy so that its transport's wake-ups do preempt the
// computing caller. The nice value is unchanged, so the worker gets the same
// share of the CPU either way. Failures (a policy the system refuses) are
// ignored: only the speed changes.
void SetWorkerWaitingPolicy(bool waiting);

}  // namespace plexus::kit
