// The container's mount namespace, dumped by the source's CRIU before the
// freeze (criu-patches/0030), arrives while the warm restore waits: it goes
// to <session>/mnt-early, and the waiting CRIU, told through the shim
// ("mounts" on the gate, 'm' on its wait fd), builds the mount tree from it
// before the images come. CRIU uses that tree only if the final images hold
// the same files, so nothing here can make a restore wrong; a failure only
// leaves the tree to be built at the go, as before.
#include "incoming_session.hpp"

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "criu/criu_features.hpp"
#include "engine_request.hpp"
#include "image_names.hpp"
#include "line_socket.hpp"
#include "sys/subprocess.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace ferry::pagesrv {

namespace {

constexpr const char* early_dir = criu::mounts_early_dir;
// CRIU renames it once it built the tree from it.
constexpr const char* built_dir = "mnt-early.built";
// CRIU's warning when the final images differ (the mounts changed before
// the freeze): it then builds the tree again, as without them.
constexpr std::string_view rebuilt_line = "does not fit the images: building it again";
constexpr auto tar_limit = std::chrono::seconds(10);

// Fault injection (early-mounts-stale): the early image of the container's
// /dev (the tmpfs archive holding ./null) gets one more file, as if /dev
// had changed between the early dump and the freeze. The tree CRIU builds
// from it then differs from the final images, which it must notice.
void make_dev_image_stale(const std::filesystem::path& dir) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const auto name = entry.path().filename().string();
        if (!name.starts_with("tmpfs-dev-"))
            continue;
        const auto listing = run_capture({"tar", "-tzf", entry.path().string()}, tar_limit);
        if (listing.find("./null\n") == std::string::npos)
            continue;
        const auto tree = dir / ".stale";
        std::filesystem::create_directory(tree);
        (void)run_capture({"tar", "-xzf", entry.path().string(), "-C", tree.string()}, tar_limit);
        std::ofstream(tree / "ferry-stale-early-mount").put('\n');
        (void)run_capture(
            {"tar", "--numeric-owner", "-czf", entry.path().string(), "-C", tree.string(), "."},
            tar_limit);
        std::filesystem::remove_all(tree);
        return;
    }
    throw error("no early image of /dev to make stale");
}

} // namespace

bool incoming_session::builds_mounts_early() const {
    const auto& criu = _d.config().tools.criu;
    return !_engine.empty() && criu::supports_restore_wait(criu) &&
           criu::supports_option(criu, "mnt-early");
}

void incoming_session::take_mounts_early(const FerryControl__IncomingMounts& mounts) noexcept {
    try {
        if (!_warm_shim || !builds_mounts_early())
            throw error("the restore here does not wait warm for them");
        const auto dir = _dir / early_dir;
        std::filesystem::remove_all(dir);
        std::filesystem::create_directory(dir);
        for (size_t i = 0; i < mounts.n_files; i++) {
            const auto& f = *mounts.files[i];
            if (!acceptable_image_name(f.name) ||
                buffer_checksum(f.data.data, f.data.len) != f.xxh64)
                throw error(fmt::format("the source's early {} is corrupt or misnamed", f.name));
            std::ofstream out(dir / f.name, std::ios::binary | std::ios::trunc);
            out.write(reinterpret_cast<const char*>(f.data.data), std::streamsize(f.data.len));
            if (!out)
                throw error(fmt::format("cannot write {}", (dir / f.name).string()));
        }
        if (fault_injected(fault::early_mounts_stale)) {
            _log->warn("fault injection: the early image of /dev is made stale");
            make_dev_image_stale(dir);
        }
        engines::write_line(_warm_shim.get(), engines::mounts_early_note);
        _mounts_early_given = true;
        _log->debug("the waiting restore builds the mount tree from {} early images",
                    mounts.n_files);
    } catch (const std::exception& e) {
        _mounts_early_refused = e.what();
        _log->info("the mount tree is built at the go: {}", e.what());
    }
}

// After the resume: CRIU renamed the dir if it built the tree, and warns
// (logged at every level Ferry runs it at) if it did not use it.
std::string incoming_session::mounts_early_outcome() const {
    if (!_mounts_early_refused.empty())
        return "not given to CRIU: " + _mounts_early_refused;
    if (!_mounts_early_given)
        return "";
    std::error_code ec;
    if (!std::filesystem::is_directory(_dir / built_dir, ec))
        return "given to CRIU, not built while waiting (restore.log says why)";
    std::ifstream log(_dir / "restore.log");
    std::string line;
    while (std::getline(log, line))
        if (line.find(rebuilt_line) != std::string::npos)
            return "built while waiting, not used: the mounts changed before the freeze";
    return "built while waiting, used";
}

} // namespace ferry::pagesrv
