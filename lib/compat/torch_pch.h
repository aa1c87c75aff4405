// The LibTorch headers every LibTorch translation unit needs, compiled once as a
// precompiled header (CMakeLists.txt). Narrow headers only: never <torch/torch.h>.
#pragma once
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/optim/adamw.h>
#include <torch/autograd.h>
#include "compat/torch_compat.h"
