// What most backends share besides the table: their communicators' numeric
// settings, and the capabilities of collectives run by plexus-algos.
#pragma once

#include <cstdint>
#include <string>

#include "plexus/backend.h"
#include "plexus/settings/table.hpp"

namespace plexus::kit {

// The communicator's setting `key` (algos::CommSetting: its own
// configuration, else the environment) as a whole number in [lo, hi].
// Unset: true and *value unchanged. Set but not such a number: false and
// *error = "<key>='<value>' is not a number of <unit> (<lo>-<hi>)".
bool IntSetting(const plexus_host_v1& host, const plexus_comm_config_v1& config, const char* key,
                int64_t lo, int64_t hi, const char* unit, int64_t* value, std::string* error);

// The same for one of Plexus' own settings, its range from the settings
// table: "<NAME>='<value>' is not a whole number in <range>".
bool IntSetting(const plexus_host_v1& host, const plexus_comm_config_v1& config, settings::Id id,
                int64_t* value, std::string* error);

// A choice setting of the table (settings::Type::kChoice): unset or empty
// gives "" ; a value not among the table's is false with *error set.
bool ChoiceSetting(const plexus_host_v1& host, const plexus_comm_config_v1& config, settings::Id id,
                   std::string* value, std::string* error);

// The capabilities of a backend whose collectives are plexus-algos
// algorithms on host memory: every dtype of ABI 1, every reduction op on
// each (reduce_dtypes, which allreduce_coalesced shares with allreduce,
// reduce and reduce_scatter: it runs the same allreduce algorithms), in
// place, abort that interrupts, any thread. collectives: the PLEXUS_COLL_*
// bits it has slots for.
void SetAlgosHostCapabilities(plexus_capabilities& caps, uint32_t collectives);

}  // namespace plexus::kit
