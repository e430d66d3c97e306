// The operator's settings read from the environment (sys/host_tools.hpp):
// CRIU's log level, the one a typo in must stop the binary.
#include "core/error.hpp"
#include "sys/host_tools.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>

using ferry::host_tools;

namespace {

// Sets FERRY_CRIU_LOG_LEVEL for one scope, and unsets it after.
struct criu_log_level_env {
    explicit criu_log_level_env(const char* value) { ::setenv("FERRY_CRIU_LOG_LEVEL", value, 1); }
    ~criu_log_level_env() { ::unsetenv("FERRY_CRIU_LOG_LEVEL"); }
};

} // namespace

TEST_CASE("CRIU's log level comes from FERRY_CRIU_LOG_LEVEL", "[host_tools]") {
    ::unsetenv("FERRY_CRIU_LOG_LEVEL");
    const int unset = host_tools::from_environment().criu_log_level;
    CHECK(unset >= 0);
    CHECK(unset <= 4);
    for (const char* level : {"0", "2", "4"}) {
        criu_log_level_env env(level);
        CHECK(host_tools::from_environment().criu_log_level == level[0] - '0');
    }
}

TEST_CASE("A FERRY_CRIU_LOG_LEVEL that is not 0-4 is an error", "[host_tools]") {
    for (const char* bad : {"5", "-1", "44", "v4", "debug"}) {
        criu_log_level_env env(bad);
        CHECK_THROWS_AS(host_tools::from_environment(), ferry::error);
    }
}
