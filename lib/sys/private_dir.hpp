// A work directory of Ferry's own on a shared tmpfs (/dev/shm): dump images
// and logs go there, and they hold the workload's memory and descriptors.
// Anyone may create names in /dev/shm, so a name someone else made first
// (a symlink elsewhere, a directory they own or can write) is refused.
#pragma once

#include <filesystem>

namespace ferry {

// Creates `dir` (and its parents) if it is missing, then checks that it is
// a directory, not a symlink, owned by this user and written by nobody
// else, and makes it 0700. Throws ferry::error saying what is wrong.
void make_private_dir(const std::filesystem::path& dir);

} // namespace ferry
