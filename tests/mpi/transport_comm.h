// A communicator on one forced transport, for the tests that loop over them.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "harness.h"

namespace bctest {

// Creates a communicator with `options` (which force BC_TRANSPORT=transport).
// Null, with a warning, where that transport cannot run on any rank here;
// any other failure fails the test case.
inline bc_comm_t create_on_transport(const std::string &options, const std::string &transport) {
  bc_comm_t comm = nullptr;
  const bc_status_t created = bc_comm_create_with(MPI_COMM_WORLD, options.c_str(), &comm);
  if (everywhere(created == BC_ERR_NOT_SUPPORTED)) {
    WARN("BC_TRANSPORT=" << transport << " is not available here: skipped");
    return nullptr;
  }
  INFO(options << ": " << bc_last_error());
  REQUIRE(everywhere(created == BC_OK));
  return comm;
}

}  // namespace bctest
