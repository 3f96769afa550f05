// The dynamic symbols a shared object exports, read from its ELF file.
//
// Why parse the file instead of asking dlsym or running nm: dlsym answers
// only for names we already know, and binutils may not be installed where a
// vendor runs this suite. The ABI asks a plugin to export exactly its entry
// function, so the suite reads .dynsym with <elf.h> itself.
#pragma once

#include <string>
#include <vector>

namespace plexus::conformance {

// Fills *names with the symbols of path's .dynsym that another object could
// bind to: defined (not SHN_UNDEF), global, weak or GNU-unique binding, and
// default or protected visibility. The names of version definitions (the
// absolute symbols a named version node adds) are left out. Returns false
// with *error set when the file is not a readable ELF shared object.
bool ExportedDynamicSymbols(const std::string& path, std::vector<std::string>* names,
                            std::string* error);

}  // namespace plexus::conformance
