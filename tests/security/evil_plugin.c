/* What an attacker would have a rank load: a library whose constructor runs
 * code in the rank the moment it is dlopen()ed, before any entry point. It
 * appends "code ran in pid P uid U" to the file PLEXUS_TEST_EVIL_MARKER names;
 * the security tests check that the file never appears (nothing read from the
 * store is ever loaded). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void plexus_test_evil_constructor(void) {
  const char* marker = getenv("PLEXUS_TEST_EVIL_MARKER");
  FILE* f = fopen(marker != NULL ? marker : "/tmp/plexus-test-evil-ran", "a");
  if (f != NULL) {
    fprintf(f, "code ran in pid %d uid %d\n", (int)getpid(), (int)getuid());
    fclose(f);
  }
}
