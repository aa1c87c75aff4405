// SLURM host lists ("gpu[01-04,07],login1"), expanded without calling `scontrol show
// hostnames`: the launcher and the workers both take the master host from
// SLURM_JOB_NODELIST.
#pragma once

#include <string>
#include <vector>

namespace ddp_embed::slurm {

// Expands a SLURM host list: "gpu[01-04,07],login1" -> gpu01 gpu02 gpu03 gpu04 gpu07
// login1. Zero padding follows the range's first number; several bracket groups in one
// name give their product. Throws std::invalid_argument on malformed input.
std::vector<std::string> expand_nodelist(const std::string& nodelist);

}  // namespace ddp_embed::slurm
