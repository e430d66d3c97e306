#include "core/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>

namespace ferry {

std::shared_ptr<spdlog::logger> make_logger(const std::string& component) {
    if (auto existing = spdlog::get(component))
        return existing;
    auto logger = spdlog::stderr_logger_mt(component);
    logger->set_pattern("%H:%M:%S.%e %n[%P] %l: %v");
    logger->set_level(spdlog::get_level());
    return logger;
}

std::shared_ptr<spdlog::logger> make_logger(const std::string& component,
                                            const std::string& migration_id) {
    // A sink of its own: a pattern belongs to the sink, and the component's
    // logger keeps its own. Each writes whole lines to stderr.
    auto logger = std::make_shared<spdlog::logger>(
        component, std::make_shared<spdlog::sinks::stderr_sink_mt>());
    // The id is hex: nothing in it reads as a pattern flag.
    logger->set_pattern("%H:%M:%S.%e %n[%P] %l: migration " + migration_id + ": %v");
    logger->set_level(spdlog::get_level());
    return logger;
}

void configure_logging(const std::string& level) {
    spdlog::set_level(spdlog::level::from_str(level)); // the registry's loggers too
}

} // namespace ferry
