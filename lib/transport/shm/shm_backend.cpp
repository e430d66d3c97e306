#include "transport/shm/shm_backend.hpp"

#include "core/error.hpp"
#include "core/page.hpp"
#include "transport/shm/shm_channel.hpp"
#include "transport/shm/shm_stager.hpp"

namespace ferry::transport::shm {

const shm_backend backend_instance;

namespace {

// /dev/shm is tmpfs on every Linux.
const std::filesystem::path region_dir = "/dev/shm";

// Before the registration: the region file alone; after: the stager that
// owns it.
struct shm_state final : source_state {
    region_file prepared;
    std::unique_ptr<shm_stager> stager;
};

// The acceptance points into these until it is sent.
struct shm_accept final : accept_storage {
    std::string path;
    std::vector<FerryControl__ShmRange> ranges;
    std::vector<FerryControl__ShmRange*> pointers;
};

} // namespace

std::unique_ptr<page_channel> shm_backend::open(std::unique_ptr<net::stream> handshake,
                                                const FerryControl__PageChannelAccepted& accepted,
                                                const fabric_spec& spec,
                                                FerryControl__ChannelKind kind,
                                                uint32_t max_pages) const {
    return std::make_unique<shm_channel>(std::move(handshake), accepted, spec.model, max_pages,
                                         kind == FERRY_CONTROL__CHANNEL_KIND__FAULT);
}

// The tree's anonymous memory, a little more for the region's header and
// per-page state, and some slack for what it allocates meanwhile.
std::unique_ptr<source_state> shm_backend::prepare(pid_t root, const std::string& id) const {
    auto st = std::make_unique<shm_state>();
    const uint64_t anon = anonymous_bytes_of_tree(root);
    st->prepared =
        region_file::create(region_dir, id, layout(anon / page_size).total_size + anon / 16);
    return st;
}

// Staging overlaps the destination's restore.
std::unique_ptr<source_state> shm_backend::start(page_source& src,
                                                 std::unique_ptr<source_state> prepared) const {
    auto st = std::make_unique<shm_state>();
    auto* p = dynamic_cast<shm_state*>(prepared.get());
    region_file file =
        p && p->prepared ? std::move(p->prepared) : region_file::create(region_dir, src.id(), 0);
    st->stager = std::make_unique<shm_stager>(src, std::move(file));
    return st;
}

std::unique_ptr<accept_storage> shm_backend::accept(FerryControl__PageChannelAccepted& ok,
                                                    source_state* state) const {
    auto* st = dynamic_cast<shm_state*>(state);
    if (!st || !st->stager)
        throw error("the shm region of this migration was never set up");
    const auto& stager = *st->stager;
    auto a = std::make_unique<shm_accept>();
    a->path = stager.file().string();
    ok.shm_path = a->path.data();
    ok.has_shm_size = true;
    ok.shm_size = stager.size();
    const auto& ranges = stager.index().ranges();
    a->ranges.resize(ranges.size());
    for (size_t i = 0; i < ranges.size(); i++) {
        auto& r = a->ranges[i];
        r = FERRY_CONTROL__SHM_RANGE__INIT;
        r.pid = ranges[i].pid;
        r.start = ranges[i].start;
        r.end = ranges[i].end;
        r.first_page = ranges[i].first_page;
        a->pointers.push_back(&r);
    }
    ok.n_shm_ranges = a->pointers.size();
    ok.shm_ranges = a->pointers.data();
    return a;
}

} // namespace ferry::transport::shm
