// link_identity on the control connection (control.proto's moving_link).
#pragma once

#include "netlink/link_identity.hpp"
#include "wire/control.pb-c.h"

#include <string>
#include <vector>

namespace ferry::netlink {

// The messages for `links`, valid while this lives (it owns their storage).
class moving_link_messages {
  public:
    explicit moving_link_messages(const std::vector<link_identity>& links);
    moving_link_messages(const moving_link_messages&) = delete;
    moving_link_messages& operator=(const moving_link_messages&) = delete;

    std::vector<FerryControl__MovingLink*> pointers;

  private:
    std::vector<link_identity> _links;
    std::vector<FerryControl__MovingLink> _messages;
    std::vector<std::vector<std::string>> _text;
    std::vector<std::vector<char*>> _text_pointers;
};

// The links a peer sent; throws ferry::error on a malformed one.
std::vector<link_identity> from_messages(FerryControl__MovingLink* const* links, size_t n);

} // namespace ferry::netlink
