// One named spdlog logger per component, writing to stderr.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace ferry {

// At the level configure_logging set (info until then).
std::shared_ptr<spdlog::logger> make_logger(const std::string& component);

// Sets every logger's level, present and future: "trace", "debug", "info",
// "warn", "err". Each binary's main() calls it once.
void configure_logging(const std::string& level);

} // namespace ferry
