#include "plexus/kit/settings.hpp"

#include <cstdlib>

#include "plexus/algos/comm_setting.hpp"

namespace plexus::kit {

bool IntSetting(const plexus_host_v1& host, const plexus_comm_config_v1& config, const char* key,
                int64_t lo, int64_t hi, const char* unit, int64_t* value, std::string* error) {
  const std::string v = algos::CommSetting(host, config, key);
  if (v.empty()) return true;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || x < lo || x > hi) {
    *error = std::string(key) + "='" + v + "' is not a number of " + unit + " (" +
             std::to_string(lo) + "-" + std::to_string(hi) + ")";
    return false;
  }
  *value = x;
  return true;
}

bool IntSetting(const plexus_host_v1& host, const plexus_comm_config_v1& config, settings::Id id,
                int64_t* value, std::string* error) {
  const std::string v = algos::CommSetting(host, config, settings::Name(id));
  if (v.empty()) return true;
  return settings::ParseInt(settings::Get(id), v, value, error);
}

bool ChoiceSetting(const plexus_host_v1& host, const plexus_comm_config_v1& config, settings::Id id,
                   std::string* value, std::string* error) {
  std::string v = algos::CommSetting(host, config, settings::Name(id));
  if (!v.empty() && !settings::CheckChoice(settings::Get(id), v, error)) return false;
  *value = std::move(v);
  return true;
}

void SetAlgosHostCapabilities(plexus_capabilities& caps, uint32_t collectives) {
  constexpr uint32_t kAllDtypes = 0x1ffeu;  // bits 1..12: every dtype of ABI 1
  caps.collectives = collectives;
  caps.memory_types = 1u << PLEXUS_MEMORY_HOST;
  caps.dtypes = kAllDtypes;
  for (uint32_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op)
    caps.reduce_dtypes[op] = kAllDtypes;
  caps.flags = PLEXUS_CAP_IN_PLACE | PLEXUS_CAP_ABORT;
  caps.thread_level = PLEXUS_THREAD_MULTIPLE;
}

}  // namespace plexus::kit
