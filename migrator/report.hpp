// Printing a migration's outcome: a human summary or one JSON object.
#pragma once

#include "migrate.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace ferry::migrator {

nlohmann::json to_json(const migration_result& r);
std::string human_summary(const migration_result& r);

} // namespace ferry::migrator
