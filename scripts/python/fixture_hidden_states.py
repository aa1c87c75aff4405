"""transformers' hidden states of every layer for one fixed padded batch: what the C++
tests hold an encoder's layers to (tests/torch/hidden_states_support.h), written by the
fixture makers (make_gemma_fixtures.py, make_mpnet_fixtures.py, make_modernbert_fixtures.py).

write_hidden_states(model, low, high, pad_id, path) writes to `path` (safetensors):
    input_ids [B, L] int64 and attention_mask [B, L] int64: rows of 12, 7, 3 and 1 real
    tokens drawn from [low, high) under a fixed seed, right-padded with pad_id;
    hidden_states.K [B, L, H] fp32 for K = 0 .. num_layers: the model's output_hidden_states
    (K 0: the embeddings; K < num_layers: after layer K; K num_layers: the last hidden state,
    checked to be last_hidden_state).
"""

import sys

LENGTHS = (12, 7, 3, 1)


def write_hidden_states(model, low, high, pad_id, path):
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(low, high, (len(LENGTHS), max(LENGTHS)), generator=generator)
    mask = torch.zeros(len(LENGTHS), max(LENGTHS), dtype=torch.long)
    for row, n in enumerate(LENGTHS):
        mask[row, :n] = 1
        ids[row, n:] = pad_id
    with torch.no_grad():
        result = model.eval()(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    hidden = result.hidden_states
    if len(hidden) != model.config.num_hidden_layers + 1:
        sys.exit(f"{len(hidden)} hidden states, not num_hidden_layers + 1")
    if not torch.equal(hidden[-1], result.last_hidden_state):
        sys.exit("the last hidden_states entry is not last_hidden_state")
    tensors = {"input_ids": ids.contiguous(), "attention_mask": mask.contiguous()}
    for k, h in enumerate(hidden):
        tensors[f"hidden_states.{k}"] = h.float().contiguous()
    save_file(tensors, path)
