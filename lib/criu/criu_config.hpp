// The CRIU config file every CRIU of a migration reads: Ferry's plugin (if
// installed) and the migration's own options.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace ferry::criu {

// CRIU options of every restore, whatever drives it: connections that a
// `--tcp-close` dump left out come back closed (CRIU insists on the option
// for such images; other images have no such connections).
inline constexpr const char* restore_options = "tcp-close\n";
// The key a process tree's network namespace goes by when the destination
// makes it (CRIU's external net[INODE]:KEY, then its inherit_fd).
inline constexpr const char* moving_netns_key = "ferry-netns";
// A restore whose connections move with it (the images were dumped with
// tcp-established): tcp-close would shut them.
inline constexpr const char* restore_established_options = "tcp-established\n";

// Writes a CRIU config file that loads Ferry's plugin from `plugin_dir`
// (host_tools::criu_plugin_dir; none: CRIU runs without it), plus `extra`
// lines; returns its path.
std::filesystem::path write_config(const std::filesystem::path& file, const std::string& extra,
                                   const std::optional<std::filesystem::path>& plugin_dir);

} // namespace ferry::criu
