// Everything a C++ user of Plexus includes.
#pragma once

#include "plexus/communicator.hpp"
#include "plexus/error.hpp"
#include "plexus/trace.hpp"
#include "plexus/types.hpp"
#include "plexus/work.hpp"
