#include "elf_symbols.hpp"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

namespace plexus::conformance {
namespace {

// The two ELF classes differ only in field widths; one template reads both.
struct Elf64 {
  using Ehdr = Elf64_Ehdr;
  using Shdr = Elf64_Shdr;
  using Sym = Elf64_Sym;
  static unsigned Bind(unsigned char info) { return ELF64_ST_BIND(info); }
  static unsigned Visibility(unsigned char other) { return ELF64_ST_VISIBILITY(other); }
};
struct Elf32 {
  using Ehdr = Elf32_Ehdr;
  using Shdr = Elf32_Shdr;
  using Sym = Elf32_Sym;
  static unsigned Bind(unsigned char info) { return ELF32_ST_BIND(info); }
  static unsigned Visibility(unsigned char other) { return ELF32_ST_VISIBILITY(other); }
};

// Bounds-checked view of the file: a corrupt file is an error, not a crash.
class Image {
 public:
  explicit Image(std::string bytes) : bytes_(std::move(bytes)) {}
  template <typename T>
  bool Read(uint64_t offset, T* out) const {
    if (offset > bytes_.size() || bytes_.size() - offset < sizeof(T)) return false;
    std::memcpy(out, bytes_.data() + offset, sizeof(T));
    return true;
  }
  // The NUL-terminated string at table + index inside [table, table + size).
  bool String(uint64_t table, uint64_t size, uint64_t index, std::string* out) const {
    if (table > bytes_.size() || size > bytes_.size() - table || index >= size) return false;
    const char* begin = bytes_.data() + table + index;
    const void* nul = std::memchr(begin, '\0', size - index);
    if (!nul) return false;
    out->assign(begin, static_cast<const char*>(nul));
    return true;
  }
  size_t size() const { return bytes_.size(); }

 private:
  std::string bytes_;
};

template <typename E>
bool Parse(const Image& image, std::vector<std::string>* names, std::string* error) {
  typename E::Ehdr eh;
  if (!image.Read(0, &eh)) return *error = "truncated ELF header", false;
  if (eh.e_type != ET_DYN) return *error = "not a shared object (e_type is not ET_DYN)", false;
  if (eh.e_shentsize != sizeof(typename E::Shdr)) {
    return *error = "unexpected section header size", false;
  }
  std::vector<typename E::Shdr> sections(eh.e_shnum);
  for (size_t i = 0; i < sections.size(); ++i) {
    if (!image.Read(eh.e_shoff + i * sizeof(typename E::Shdr), &sections[i])) {
      return *error = "truncated section header table", false;
    }
  }
  // Version definition names (SHT_GNU_verdef), to tell them from real symbols.
  std::set<std::string> version_names;
  for (const auto& sec : sections) {
    if (sec.sh_type != SHT_GNU_verdef || sec.sh_link >= sections.size()) continue;
    const auto& strtab = sections[sec.sh_link];
    uint64_t offset = sec.sh_offset;
    for (uint64_t n = 0; n < sec.sh_info; ++n) {
      Elf64_Verdef vd;  // same layout in both classes
      if (!image.Read(offset, &vd)) break;
      uint64_t aux_offset = offset + vd.vd_aux;
      Elf64_Verdaux aux;
      std::string name;
      if (vd.vd_cnt > 0 && image.Read(aux_offset, &aux) &&
          image.String(strtab.sh_offset, strtab.sh_size, aux.vda_name, &name)) {
        version_names.insert(name);
      }
      if (vd.vd_next == 0) break;
      offset += vd.vd_next;
    }
  }
  bool found = false;
  for (const auto& sec : sections) {
    if (sec.sh_type != SHT_DYNSYM) continue;
    found = true;
    if (sec.sh_link >= sections.size() || sec.sh_entsize != sizeof(typename E::Sym)) {
      return *error = "malformed .dynsym section header", false;
    }
    const auto& strtab = sections[sec.sh_link];
    const uint64_t count = sec.sh_size / sizeof(typename E::Sym);
    for (uint64_t i = 1; i < count; ++i) {  // entry 0 is the reserved null symbol
      typename E::Sym sym;
      if (!image.Read(sec.sh_offset + i * sizeof sym, &sym)) {
        return *error = "truncated .dynsym", false;
      }
      if (sym.st_shndx == SHN_UNDEF) continue;
      const unsigned bind = E::Bind(sym.st_info);
      if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) continue;
      const unsigned vis = E::Visibility(sym.st_other);
      if (vis != STV_DEFAULT && vis != STV_PROTECTED) continue;
      std::string name;
      if (!image.String(strtab.sh_offset, strtab.sh_size, sym.st_name, &name)) {
        return *error = "symbol name outside .dynstr", false;
      }
      if (sym.st_shndx == SHN_ABS && version_names.count(name)) continue;
      names->push_back(name);
    }
  }
  if (!found) return *error = "no .dynsym section", false;
  return true;
}

}  // namespace

bool ExportedDynamicSymbols(const std::string& path, std::vector<std::string>* names,
                            std::string* error) {
  names->clear();
  std::ifstream in(path, std::ios::binary);
  if (!in) return *error = "cannot open " + path, false;
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const Image image(std::move(bytes));
  unsigned char ident[EI_NIDENT];
  if (!image.Read(0, &ident) || std::memcmp(ident, ELFMAG, SELFMAG) != 0) {
    return *error = path + " is not an ELF file", false;
  }
  if (ident[EI_DATA] != ELFDATA2LSB && ident[EI_DATA] != ELFDATA2MSB) {
    return *error = "unknown ELF byte order", false;
  }
  // Reading the fields in host order: a plugin this process could dlopen has
  // the host's byte order.
  const bool host_little = [] {
    const uint16_t one = 1;
    unsigned char b;
    std::memcpy(&b, &one, 1);
    return b == 1;
  }();
  if ((ident[EI_DATA] == ELFDATA2LSB) != host_little) {
    return *error = "ELF byte order differs from this machine's", false;
  }
  if (ident[EI_CLASS] == ELFCLASS64) return Parse<Elf64>(image, names, error);
  if (ident[EI_CLASS] == ELFCLASS32) return Parse<Elf32>(image, names, error);
  return *error = "unknown ELF class", false;
}

}  // namespace plexus::conformance
