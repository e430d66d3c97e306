// Unpacking the tars container engines exchange (a container's writable
// layer, its /dev/shm) into a directory, with owners, modes, times and
// extended attributes, and without ever writing outside that directory.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ferry {

// Extracts `tar` into `dest` (which must exist); throws ferry::error on a
// malformed archive or an entry that would escape `dest`.
void extract_tar(const std::filesystem::path& tar, const std::filesystem::path& dest);

// A container path ("/etc/issue.net") as a path below `root`; throws
// ferry::error if it is not absolute, or climbs out with "..".
std::filesystem::path path_below(const std::filesystem::path& root, const std::string& path);

// Removes container path `path` (a file or a whole tree) from the container
// root `root`, resolving symlinks on the way as the container would, inside
// `root` (openat2 RESOLVE_IN_ROOT): a container's own symlinks never lead
// outside it. A path that does not exist is not an error.
void remove_below(const std::filesystem::path& root, const std::string& path);

} // namespace ferry
