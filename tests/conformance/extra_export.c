/* Linked into a copy of tests/bench/wrong_backend.c: one more exported
 * function, the kind of symbol a plugin built without -fvisibility=hidden
 * or the version script leaks. plexus-conformance must name it. */
#define EXPORT __attribute__((visibility("default")))

EXPORT int plexus_test_leaked_helper(void) {
  return 42;
}
