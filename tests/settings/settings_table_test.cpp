// The settings table's own rules: ranges, choices, nearest names, unknown
// variables in the environment.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <set>
#include <string>

#include "plexus/settings/environment.hpp"

using plexus::settings::Id;
namespace settings = plexus::settings;

TEST_CASE("every setting has a unique PLEXUS_ name, a doc line and a layer") {
  std::set<std::string> names;
  for (const settings::Setting& s : settings::All()) {
    CHECK(std::string(s.name).rfind("PLEXUS_", 0) == 0);
    CHECK(names.insert(s.name).second);
    CHECK(std::string(s.doc).size() > 10);
    CHECK(std::string(s.layer).size() > 1);
    CHECK(std::string(s.doc).find('\n') == std::string::npos);
    if (s.type == settings::Type::kInt || s.type == settings::Type::kSeconds) CHECK(s.lo <= s.hi);
  }
}

TEST_CASE("numbers are checked against the table's range") {
  const settings::Setting& spin = settings::Get(Id::kTcpSpinUs);
  int64_t v = -1;
  std::string why;
  CHECK(settings::ParseInt(spin, "25", &v, &why));
  CHECK(v == 25);
  CHECK_FALSE(settings::ParseInt(spin, "2000000", &v, &why));
  CHECK(why == "PLEXUS_TCP_SPIN_US='2000000' is out of range (0-1000000 us)");
  CHECK(v == 25);  // unchanged on failure
  CHECK_FALSE(settings::ParseInt(spin, "12abc", &v, &why));
  CHECK(why.find("is not a whole number") != std::string::npos);
  CHECK_FALSE(settings::ParseInt(spin, "", &v, &why));
  double seconds = 0;
  CHECK(settings::ParseNumber(settings::Get(Id::kTimeout), "0.5", &seconds, &why));
  CHECK(seconds == 0.5);
  CHECK_FALSE(settings::ParseNumber(settings::Get(Id::kTimeout), "0", &seconds, &why));
  CHECK(why == "PLEXUS_TIMEOUT='0' is out of range (0.001-10000000 s)");
  CHECK_FALSE(settings::ParseNumber(settings::Get(Id::kTimeout), "nan", &seconds, &why));
}

TEST_CASE("choices are the table's") {
  std::string why;
  CHECK(settings::CheckChoice(settings::Get(Id::kHierarchy), "on", &why));
  CHECK_FALSE(settings::CheckChoice(settings::Get(Id::kHierarchy), "yes", &why));
  CHECK(why == "PLEXUS_HIERARCHY='yes' is not one of auto, on, off");
  CHECK_FALSE(settings::CheckChoice(settings::Get(Id::kHierarchy), "of", &why));
}

TEST_CASE("the nearest declared name") {
  CHECK(std::string(settings::Nearest("PLEXUS_BAKCEND")) == "PLEXUS_BACKEND");
  CHECK(std::string(settings::Nearest("PLEXUS_TIMOUT")) == "PLEXUS_TIMEOUT");
  CHECK(std::string(settings::Nearest("PLEXUS_TCP_SPIN")) == "PLEXUS_TCP_SPIN_US");
  CHECK(settings::Find("PLEXUS_BACKEND") == &settings::Get(Id::kBackend));
  CHECK(settings::Find("PLEXUS_BAKCEND") == nullptr);
}

TEST_CASE("unknown PLEXUS_ variables in the environment, each with its nearest") {
  setenv("PLEXUS_SHM_SLOT_KB", "64", 1);
  setenv("PLEXUS_SHM_SLOT_KIB", "64", 1);
  setenv("NOT_PLEXUS_THING", "1", 1);
  const auto unknown = settings::UnknownInEnvironment();
  int found = 0;
  for (const auto& [name, nearest] : unknown) {
    CHECK(name != "PLEXUS_SHM_SLOT_KIB");
    CHECK(name != "NOT_PLEXUS_THING");
    if (name == "PLEXUS_SHM_SLOT_KB") {
      ++found;
      CHECK(nearest == "PLEXUS_SHM_SLOT_KIB");
    }
  }
  CHECK(found == 1);
  unsetenv("PLEXUS_SHM_SLOT_KB");
  unsetenv("PLEXUS_SHM_SLOT_KIB");
  unsetenv("NOT_PLEXUS_THING");
  for (const auto& line : settings::UnknownWarnings())
    CHECK(line.find("SLOT_KB") == std::string::npos);
}

TEST_CASE("ReadInt leaves the value alone when unset and reports a bad one") {
  unsetenv("PLEXUS_TRACE_OPS");
  int64_t v = 7;
  std::string why;
  CHECK(settings::ReadInt(Id::kTraceOps, &v, &why));
  CHECK(v == 7);
  setenv("PLEXUS_TRACE_OPS", "-1", 1);
  CHECK_FALSE(settings::ReadInt(Id::kTraceOps, &v, &why));
  CHECK(why == "PLEXUS_TRACE_OPS='-1' is out of range (0-1048576)");
  unsetenv("PLEXUS_TRACE_OPS");
}
