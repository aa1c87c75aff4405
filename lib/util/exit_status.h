// The exit status that ends a job at once: embed-train's input is wrong (the config, the
// world-size rules, a data file, a tokenizer, a model or prepared folder), so the same
// command would fail the same way again. ddp-launch never restarts on it (docs/cli.md).
// 78 is sysexits.h's EX_CONFIG; a crash or a lost peer exits otherwise and is restarted.
#pragma once

namespace ddp_embed {

inline constexpr int kExitBadInput = 78;

}  // namespace ddp_embed
