// A work directory of Ferry's own on a shared tmpfs (/dev/shm): dump images
// and logs go there, and they hold the workload's memory and descriptors.
// Anyone may create names in /dev/shm, so a name someone else made first
// (a symlink elsewhere, a directory they own or can write) is refused.
#pragma once

#include <filesystem>

namespace ferry {

// Creates `dir` 0700 (and its parents) if it is missing; otherwise checks
// that it is a directory, not a symlink, owned by this user and writable
// by nobody else (it is left as it is). Throws ferry::error saying what is
// wrong.
void make_private_dir(const std::filesystem::path& dir);

} // namespace ferry
