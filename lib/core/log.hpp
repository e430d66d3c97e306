// One named spdlog logger per component, writing to stderr.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace ferry {

// At the level configure_logging set (info until then).
std::shared_ptr<spdlog::logger> make_logger(const std::string& component);
// The component's logger for one migration: every line says which
// ("... pagesrv[pid] warning: migration ID: ..."), so no call spells it out.
std::shared_ptr<spdlog::logger> make_logger(const std::string& component,
                                            const std::string& migration_id);

// Sets every logger's level, present and future: "trace", "debug", "info",
// "warn", "err". Each binary's main() calls it once.
void configure_logging(const std::string& level);

} // namespace ferry
