// One named spdlog logger per component, writing to stderr.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace ferry {

std::shared_ptr<spdlog::logger> make_logger(const std::string& component);

} // namespace ferry
