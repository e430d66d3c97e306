#include "transport/shm/shm_backend.hpp"

#include "core/error.hpp"
#include "core/page.hpp"
#include "transport/shm/shm_channel.hpp"
#include "transport/staging/advertised_ranges.hpp"
#include "transport/staging/stager.hpp"

namespace ferry::transport::shm {

using namespace staging;

const shm_backend backend_instance;

namespace {

// Before the registration: the region file alone; after: the stager that
// owns it.
struct shm_state final : source_state {
    staging::region_file prepared;
    std::unique_ptr<staging::stager> stager;
    void committed() override {
        if (stager)
            stager->stage_everything();
    }
};

// The acceptance points into these until it is sent.
struct shm_accept final : accept_storage {
    shm_accept(const stager& stager, FerryControl__PageChannelAccepted& ok)
        : path(stager.file().string()), ranges(stager.index(), ok) {}
    std::string path;
    advertised_ranges ranges;
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

std::unique_ptr<source_state> shm_backend::prepare(pid_t root, const std::string& id) const {
    auto st = std::make_unique<shm_state>();
    st->prepared = prepare_region(root, id);
    return st;
}

// Requests are staged from now on, every page once the migration commits.
std::unique_ptr<source_state> shm_backend::start(page_source& src,
                                                 std::unique_ptr<source_state> prepared) const {
    auto st = std::make_unique<shm_state>();
    auto* p = dynamic_cast<shm_state*>(prepared.get());
    st->stager = std::make_unique<staging::stager>(
        src, take_region(p ? std::move(p->prepared) : region_file{}, src.id()));
    return st;
}

std::unique_ptr<accept_storage> shm_backend::accept(FerryControl__PageChannelAccepted& ok,
                                                    source_state* state) const {
    auto* st = dynamic_cast<shm_state*>(state);
    if (!st || !st->stager)
        throw error("the shm region of this migration was never set up");
    const auto& stager = *st->stager;
    auto a = std::make_unique<shm_accept>(stager, ok);
    ok.shm_path = a->path.data();
    ok.has_shm_size = true;
    ok.shm_size = stager.size();
    return a;
}

} // namespace ferry::transport::shm
