// Checks of the table, the entry function, the capabilities and the
// exported symbols: what a host reads before it calls anything.
#include <dlfcn.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "check.hpp"
#include "data.hpp"
#include "elf_symbols.hpp"
#include "plexus/abi/collectives.hpp"
#include "plugin.hpp"
#include "rank_record.hpp"

namespace plexus::conformance {
namespace {

// A 1.0 table ends with recv; 1.1 appended request_error; 1.2 gather
// through comm_split.
constexpr size_t kTableSize10 = PLEXUS_CONFORMANCE_SLOT_END(recv);
constexpr size_t kTableSize11 = PLEXUS_CONFORMANCE_SLOT_END(request_error);
constexpr size_t kTableSize12 = PLEXUS_CONFORMANCE_SLOT_END(comm_split);
// Far beyond any plausible growth of major 1: a table this big is a
// struct_size that is not one (uninitialised, or a count of something else).
constexpr size_t kAbsurdTableSize = 64 * 1024;

constexpr uint32_t kKnownDtypes = ((1u << (PLEXUS_DTYPE_MAX_V1 + 1)) - 1) & ~1u;
// The collective codes a table of abi_minor may claim: those the list says
// came in that minor or before.
uint32_t KnownCollectives(uint16_t abi_minor) {
  uint32_t known = 0;
  for (plexus_collective_t coll = 0; coll < abi::kCollectiveCount; ++coll) {
    if (abi::MinorOf(coll) <= abi_minor) known |= 1u << coll;
  }
  return known;
}
constexpr uint32_t kKnownMemory = (1u << PLEXUS_MEMORY_HOST) | (1u << PLEXUS_MEMORY_CUDA);
constexpr uint32_t kKnownFlags = PLEXUS_CAP_IN_PLACE | PLEXUS_CAP_STREAM_ORDERED | PLEXUS_CAP_ABORT;

std::string HexMask(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%x", v);
  return text;
}

// Why text is not a good name/version string, or "".
std::string BadString(const char* what, const char* text) {
  if (!text) return std::string(what) + " is NULL";
  const size_t n = strnlen(text, 257);
  if (n == 0) return std::string(what) + " is empty";
  if (n > 256) return std::string(what) + " is longer than 256 characters";
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      return std::string(what) + " contains control character " + std::to_string(c) +
             " at offset " + std::to_string(i);
    }
  }
  return {};
}

Outcome AbiVersion(Context& ctx) {
  const auto& t = ctx.table();
  Findings f;
  if (t.abi_major != 1) f.Add("abi_major is " + std::to_string(t.abi_major) + ", not 1");
  std::string detail = "ABI " + std::to_string(t.abi_major) + "." + std::to_string(t.abi_minor);
  if (t.abi_minor > PLEXUS_ABI_MINOR) {
    detail += " (newer than this suite's 1." + std::to_string(PLEXUS_ABI_MINOR) +
              "; its newer slots are not checked)";
  }
  return f.ToOutcome(detail);
}

Outcome StructSize(Context& ctx) {
  const uint32_t size = ctx.plugin().plugin_struct_size();
  const auto& t = ctx.table();
  Findings f;
  if (size < kTableSize10) {
    f.Add("struct_size " + std::to_string(size) + " is smaller than a 1.0 table (" +
          std::to_string(kTableSize10) + " bytes)");
  }
  if (size > kAbsurdTableSize) {
    f.Add("struct_size " + std::to_string(size) + " is absurd (more than " +
          std::to_string(kAbsurdTableSize) + " bytes)");
  }
  if (t.abi_minor >= 1 && size < kTableSize11) {
    f.Add("abi_minor is " + std::to_string(t.abi_minor) + " but struct_size " +
          std::to_string(size) + " does not cover the 1.1 slot request_error (" +
          std::to_string(kTableSize11) + " bytes)");
  }
  if (t.abi_minor >= 2 && size < kTableSize12) {
    f.Add("abi_minor is " + std::to_string(t.abi_minor) + " but struct_size " +
          std::to_string(size) + " does not cover the 1.2 slots gather through comm_split (" +
          std::to_string(kTableSize12) + " bytes)");
  }
  return f.ToOutcome(std::to_string(size) + " bytes");
}

Outcome NameVersion(Context& ctx) {
  const auto& t = ctx.table();
  Findings f;
  f.Add(BadString("name", t.name));
  f.Add(BadString("version", t.version));
  if (!f.empty()) return f.ToOutcome();
  return Outcome::Pass(std::string("'") + t.name + "' version '" + t.version + "'");
}

Outcome RequiredSlots(Context& ctx) {
  const auto& t = ctx.table();
  Findings f;
  const std::pair<const char*, const void*> slots[] = {
      {"init", reinterpret_cast<const void*>(t.init)},
      {"finalize", reinterpret_cast<const void*>(t.finalize)},
      {"get_capabilities", reinterpret_cast<const void*>(t.get_capabilities)},
      {"comm_create", reinterpret_cast<const void*>(t.comm_create)},
      {"comm_destroy", reinterpret_cast<const void*>(t.comm_destroy)},
      {"comm_abort", reinterpret_cast<const void*>(t.comm_abort)},
      {"comm_last_error", reinterpret_cast<const void*>(t.comm_last_error)},
      {"test", reinterpret_cast<const void*>(t.test)},
      {"wait", reinterpret_cast<const void*>(t.wait)},
      {"request_free", reinterpret_cast<const void*>(t.request_free)},
  };
  for (const auto& [name, fn] : slots) {
    if (!fn) f.Add(std::string("required slot ") + name + " is NULL");
  }
  return f.ToOutcome();
}

Outcome RequestErrorSlot(Context& ctx) {
  const auto& t = ctx.table();
  if (t.abi_minor < 1) {
    return Outcome::Pass("1.0 table: no request_error; the host uses comm_last_error");
  }
  return Outcome::Pass(ctx.plugin().has_request_error()
                           ? "present"
                           : "NULL (optional; the host uses comm_last_error)");
}

// The slots of 1.2, read only for a 1.2 table long enough to hold them.
Outcome Slots12(Context& ctx) {
  const Plugin& p = ctx.plugin();
  const auto& t = ctx.table();
  if (t.abi_minor < 2) {
    return Outcome::Pass("backend is ABI 1." + std::to_string(t.abi_minor) +
                         ": no gather, scatter, allgatherv, alltoallv, allreduce_coalesced or "
                         "comm_split (a 1.2 host refuses them as UNSUPPORTED and makes groups "
                         "with comm_create)");
  }
  std::string present, absent;
  for (plexus_collective_t coll = 0; coll < abi::kCollectiveCount; ++coll) {
    if (abi::MinorOf(coll) != 2) continue;
    std::string& list = p.HasCollective(coll) ? present : absent;
    list += (list.empty() ? "" : ", ") + std::string(CollectiveName(coll));
  }
  std::string& split = p.has_comm_split() ? present : absent;
  split += (split.empty() ? "" : ", ") + std::string("comm_split");
  return Outcome::Pass("set: " + (present.empty() ? std::string("none") : present) +
                       "; NULL: " + (absent.empty() ? std::string("none") : absent) +
                       (p.has_comm_split() ? "" : " (groups are made with comm_create)"));
}

Outcome EntryFunction(Context& ctx) {
  const std::string& path = ctx.plugin().path();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!handle) return Outcome::Fail("cannot reopen " + path + " (RTLD_NOLOAD)");
  auto entry = reinterpret_cast<plexus_backend_get_v1_fn>(dlsym(handle, PLEXUS_BACKEND_ENTRY_V1));
  Findings f;
  if (!entry) {
    f.Add("dlsym(" PLEXUS_BACKEND_ENTRY_V1 ") failed");
  } else {
    const plexus_backend_v1* a = nullptr;
    const plexus_backend_v1* b = nullptr;
    int32_t ra, rb, r0;
    {
      // The entry function is the one call outside the table (traced_calls.hpp).
      const std::string text = std::string(PLEXUS_BACKEND_ENTRY_V1) + "(host_abi_minor " +
                               std::to_string(PLEXUS_ABI_MINOR) + ", table_out), twice";
      CallInFlight call(text.c_str());
      ra = entry(PLEXUS_ABI_MINOR, &a);
      rb = entry(PLEXUS_ABI_MINOR, &b);
    }
    if (ra != PLEXUS_OK || !a) {
      f.Add("entry function refused this host's ABI 1." + std::to_string(PLEXUS_ABI_MINOR) +
            " on a second call");
    }
    if (rb != PLEXUS_OK || a != b) {
      f.Add(
          "entry function returned a different table on a second call (tables have static "
          "storage duration)");
    }
    // A 1.0 host: either the same kind of table, or a clean refusal.
    const plexus_backend_v1* old = reinterpret_cast<const plexus_backend_v1*>(&f);  // not NULL
    {
      CallInFlight call(PLEXUS_BACKEND_ENTRY_V1 "(host_abi_minor 0, table_out)");
      r0 = entry(0, &old);
    }
    if (r0 == PLEXUS_OK && !old) f.Add("entry function for a 1.0 host returned OK and no table");
    if (r0 != PLEXUS_OK && old) {
      f.Add("entry function refused a 1.0 host with " + std::to_string(r0) +
            " but did not set *table_out to NULL");
    }
    if (r0 > 0) f.Add("entry function returned a positive status " + std::to_string(r0));
  }
  dlclose(handle);
  return f.ToOutcome();
}

Outcome CapabilitiesCall(Context& ctx) {
  const Plugin& p = ctx.plugin();
  if (p.caps_status() != PLEXUS_OK) {
    return Outcome::Fail("get_capabilities() returned " + std::to_string(p.caps_status()));
  }
  const plexus_capabilities& c = p.raw_caps();
  Findings f;
  if (c.struct_size != sizeof(plexus_capabilities)) {
    f.Add("get_capabilities() changed struct_size from " +
          std::to_string(sizeof(plexus_capabilities)) + " to " + std::to_string(c.struct_size));
  }
  if (c.reserved != 0) f.Add("reserved is " + std::to_string(c.reserved) + ", not 0");
  return f.ToOutcome();
}

Outcome CapabilityCodes(Context& ctx) {
  const plexus_capabilities& c = ctx.plugin().raw_caps();
  Findings f;
  std::string notes;
  const uint16_t minor = ctx.table().abi_minor;
  const uint32_t known = KnownCollectives(minor);
  // Codes of a later minor, for an older table.
  const uint32_t later = KnownCollectives(PLEXUS_ABI_MINOR) & ~known;
  if (c.collectives & ~(known | later)) {
    f.Add("collectives has unknown bits " + HexMask(c.collectives & ~(known | later)));
  }
  if (c.collectives & later) {
    // A plugin that passes on another's capabilities, say. The host reads
    // no bit of a later minor in an older table (it has no slots for
    // them), and nor does the rest of this suite.
    std::string minors;
    uint32_t last = 0;
    for (plexus_collective_t coll = 0; coll < abi::kCollectiveCount; ++coll) {
      if (!(c.collectives & later & (1u << coll)) || abi::MinorOf(coll) == last) continue;
      last = abi::MinorOf(coll);
      minors += (minors.empty() ? "1." : " and 1.") + std::to_string(last);
    }
    notes += "; collectives bits " + HexMask(c.collectives & later) + " (ABI " + minors +
             "'s) ignored: an ABI 1." + std::to_string(minor) +
             " table has no slots for them (claim only the codes your header knows)";
  }
  if (!(c.memory_types & (1u << PLEXUS_MEMORY_HOST))) {
    f.Add("memory_types " + HexMask(c.memory_types) + " lacks host memory");
  }
  if (c.memory_types & ~kKnownMemory) {
    f.Add("memory_types has unknown bits " + HexMask(c.memory_types & ~kKnownMemory));
  }
  if (c.dtypes & ~kKnownDtypes)
    f.Add("dtypes has unknown bits " + HexMask(c.dtypes & ~kKnownDtypes));
  for (uint32_t op = 0; op < 8; ++op) {
    const uint32_t m = c.reduce_dtypes[op];
    if ((op == 0 || op > PLEXUS_OP_MAX_V1) && m != 0) {
      f.Add("reduce_dtypes[" + std::to_string(op) + "] is " + HexMask(m) + " but " +
            std::to_string(op) + " is not an op");
    } else if (m & ~kKnownDtypes) {
      f.Add("reduce_dtypes[" + std::string(OpName(op)) + "] has unknown bits " +
            HexMask(m & ~kKnownDtypes));
    }
  }
  if (c.thread_level != PLEXUS_THREAD_SERIALIZED && c.thread_level != PLEXUS_THREAD_MULTIPLE) {
    f.Add("thread_level " + std::to_string(c.thread_level) +
          " is neither serialized (1) nor "
          "multiple (2)");
  }
  if (c.flags & ~kKnownFlags) notes += "; unknown flag bits " + HexMask(c.flags & ~kKnownFlags);
  std::string detail = "collectives " + HexMask(c.collectives) + ", dtypes " + HexMask(c.dtypes) +
                       ", memory " + HexMask(c.memory_types) + ", flags " + HexMask(c.flags) +
                       ", thread_level " +
                       (c.thread_level == PLEXUS_THREAD_MULTIPLE ? "multiple" : "serialized") +
                       ", max_outstanding " + std::to_string(c.max_outstanding) + notes;
  return f.ToOutcome(detail);
}

Outcome CapabilitiesAgainstSlots(Context& ctx) {
  const plexus_capabilities& c = ctx.plugin().caps();
  Findings f;
  std::string unclaimed;
  for (plexus_collective_t coll = 0; coll < abi::kCollectiveCount; ++coll) {
    const bool claimed = c.collectives & (1u << coll);
    // (1.2 slots only of a 1.2 table long enough: Plugin::HasCollective.)
    const bool slot = ctx.plugin().HasCollective(coll);
    if (claimed && !slot) {
      f.Add(std::string(CollectiveName(coll)) + " is claimed but " +
            ctx.plugin().NoSlotReason(coll));
    }
    if (!claimed && slot)
      unclaimed += std::string(unclaimed.empty() ? "" : ", ") + CollectiveName(coll);
  }
  uint32_t reductions = 0;
  for (plexus_collective_t coll = 0; coll < abi::kCollectiveCount; ++coll) {
    if (abi::IsReduction(coll)) reductions |= 1u << coll;
  }
  uint32_t any_reduce = 0;
  for (uint32_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op) any_reduce |= c.reduce_dtypes[op];
  std::string notes;
  if ((c.collectives & reductions) && !any_reduce) {
    notes += "; a reduction is claimed but reduce_dtypes is empty for every op";
  }
  if ((c.collectives & ~(reductions | (1u << PLEXUS_COLL_BARRIER))) && !c.dtypes) {
    notes += "; a data collective is claimed but dtypes is empty";
  }
  if (!unclaimed.empty()) notes += "; note: slot set but not claimed: " + unclaimed;
  return f.ToOutcome(notes.empty() ? std::string() : notes.substr(2));
}

Outcome SameOnEveryRank(Context& ctx) {
  const plexus_capabilities& mine = ctx.plugin().caps();
  const plexus_capabilities& zero = ctx.caps();
  if (std::memcmp(&mine, &zero, sizeof mine) == 0) return Outcome::Pass();
  Findings f;
  auto cmp = [&](const char* what, uint32_t a, uint32_t b) {
    if (a != b)
      f.Add(std::string(what) + " " + HexMask(a) + " differs from rank 0's " + HexMask(b));
  };
  cmp("collectives", mine.collectives, zero.collectives);
  cmp("dtypes", mine.dtypes, zero.dtypes);
  cmp("memory_types", mine.memory_types, zero.memory_types);
  cmp("flags", mine.flags, zero.flags);
  cmp("thread_level", mine.thread_level, zero.thread_level);
  cmp("max_outstanding", mine.max_outstanding, zero.max_outstanding);
  for (uint32_t op = 0; op < 8; ++op)
    cmp("reduce_dtypes[op]", mine.reduce_dtypes[op], zero.reduce_dtypes[op]);
  if (f.empty()) f.Add("capabilities differ from rank 0's");
  return f.ToOutcome();
}

Outcome ExportedSymbols(Context& ctx) {
  std::vector<std::string> names;
  std::string error;
  if (!ExportedDynamicSymbols(ctx.plugin().path(), &names, &error)) return Outcome::Fail(error);
  std::string extra;
  bool entry = false;
  size_t extras = 0;
  for (const std::string& n : names) {
    if (n == PLEXUS_BACKEND_ENTRY_V1) {
      entry = true;
    } else if (++extras <= 8) {
      extra += (extra.empty() ? "" : ", ") + n;
    }
  }
  Findings f;
  if (!entry) f.Add("does not export " PLEXUS_BACKEND_ENTRY_V1);
  if (extras) {
    f.Add("exports " + std::to_string(extras) + " symbol(s) besides the entry function: " + extra +
          (extras > 8 ? ", ..." : "") +
          " (build with -fvisibility=hidden and the version script of pkg-config plexus-backend)");
  }
  return f.ToOutcome("exactly " PLEXUS_BACKEND_ENTRY_V1);
}

Check Make(const std::string& name, std::function<Outcome(Context&)> fn) {
  Check c;
  c.name = name;
  c.group = "table";
  c.run = std::move(fn);
  return c;
}

}  // namespace

std::vector<Check> TableChecks(const plexus_capabilities&, uint32_t) {
  return {
      Make("table: ABI version", AbiVersion),
      Make("table: struct_size", StructSize),
      Make("table: name and version", NameVersion),
      Make("table: required slots", RequiredSlots),
      Make("table: request_error slot (1.1)", RequestErrorSlot),
      Make("table: 1.2 slots (the new collectives and comm_split)", Slots12),
      Make("table: entry function", EntryFunction),
      Make("capabilities: get_capabilities", CapabilitiesCall),
      Make("capabilities: codes and thread level", CapabilityCodes),
      Make("capabilities: claimed collectives have slots", CapabilitiesAgainstSlots),
      Make("capabilities: the same on every rank", SameOnEveryRank),
      Make("exported dynamic symbols", ExportedSymbols),
  };
}

}  // namespace plexus::conformance
