// runc's own record of a container: state.json in <runc root>/<id>/.
#pragma once

#include <filesystem>
#include <string>

namespace ferry::engines {

// The container init's stdio as runc started it (state.json's
// "external_descriptors", one line of JSON): what runc's checkpoint writes
// as descriptors.json, and what a warm restore's runc reads before its CRIU
// starts. `root` is runc's --root (containerd's namespace included). Throws
// ferry::error if it is not there or malformed.
std::string runc_external_descriptors(const std::filesystem::path& root, const std::string& id);

} // namespace ferry::engines
