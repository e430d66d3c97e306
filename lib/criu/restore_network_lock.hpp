// CRIU restores with the network lock its dump used, as inventory.img
// records it. A copy that Ferry keeps unreachable until its resume (a
// network that moves: its links answer no ARP and the segment still sends
// to the source) needs no lock of CRIU's, and CRIU removes the lock between
// the post-restore notification and the resume: in the downtime (an
// nftables transaction in the copy's namespace). This rewrites the record.
#pragma once

#include <filesystem>

namespace ferry::criu {

// Makes the restore from `images_dir` lock nothing (CRIU's network-lock
// skip); every other field of inventory.img stays as it was. Throws
// image_error on a malformed inventory.
void skip_restore_network_lock(const std::filesystem::path& images_dir);

} // namespace ferry::criu
