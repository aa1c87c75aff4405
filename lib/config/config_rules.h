// Internal to lib/config: the rules between keys, checked once every value has been read
// on its own (config/config.cpp). Appends one line to `errors` for each rule broken, naming
// the keys and who gave them (`reader`: the --set that gave one of them, else the file).
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "config/value_reader.h"

namespace ddp_embed::config_detail {

void check_relations(const Config& c, const Reader& reader, std::vector<std::string>& errors);

}  // namespace ddp_embed::config_detail
