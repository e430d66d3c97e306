#include "core/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>

namespace ferry {

std::shared_ptr<spdlog::logger> make_logger(const std::string& component) {
    if (auto existing = spdlog::get(component))
        return existing;
    auto logger = spdlog::stderr_logger_mt(component);
    logger->set_pattern("%H:%M:%S.%e %n[%P] %l: %v");
    const char* level = std::getenv("FERRY_LOG");
    logger->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
    return logger;
}

} // namespace ferry
