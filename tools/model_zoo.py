#!/usr/bin/env python3
"""Exports Kiln's model zoo: whole `transformers` and `torchvision` models, tiny configs with
random weights, as torch.export archives with their inputs and PyTorch's outputs.

Usage (on a machine with PyTorch, transformers and torchvision):
    python3 tools/model_zoo.py OUT_DIR [--only NAME ...] [--census]

Writes, for each model NAME of the zoo, into OUT_DIR:
    NAME.pt2            torch.export.export(...) as exported (training-IR ops)
    NAME_core.pt2       the same after run_decompositions() (core ATen)
    NAME.inputN.bin     the example inputs, raw little-endian, in each input's own dtype
                        (token ids int64, masks int64, images float32)
    NAME.expectedN.bin  the model's outputs computed in float64, rounded to float32
    NAME.json           input and output shapes and dtypes, the config, the ops each form uses

With --census, prints every op target of each form, and how often it appears.

With --realistic, exports instead each family at a realistic input size for speed
measurements (batch 8 x 512 tokens, 8 x 3 x 224 x 224 images; narrow, shallow configs so
the archives stay a few MB), traced on CUDA so that the exported module runs there, the
exported form only, and no inputs or outputs: NAME.json describes each input (shape,
dtype, and for token ids the range) so that `bench/gpu/run.py` draws them itself.

With --skeleton, also exports GPT-2 small (124 M parameters, the default GPT2Config; input
ids 1 x 128) and writes it without its weights, for machines that cannot receive 500 MB:
    gpt2_small.skeleton.pt2   the archive with every data/weights/ member emptied
    gpt2_small.weights.json   each emptied member's name and size in bytes
`tools/inflate_pt2.py` refills the weights (random, deterministic) to a complete archive.

Each model is wrapped so that it takes tensors and returns a tuple of tensors (no
ModelOutput dicts): that is what `torch.export` and Kiln's importer exchange.
"""
import argparse
import collections
import copy
import json
import os
import sys

import torch


def write(path, tensor, dtype=None):
    t = tensor.detach().to("cpu")
    if dtype is not None:
        t = t.to(dtype)
    with open(path, "wb") as f:
        f.write(t.contiguous().numpy().tobytes())


class Outputs(torch.nn.Module):
    """Calls a Hugging Face model by keyword and returns the named fields as a tuple."""

    def __init__(self, model, names, fields, **extra):
        super().__init__()
        self.model = model
        self.names = names
        self.fields = fields
        self.extra = extra

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)), return_dict=True, **self.extra)
        return tuple(getattr(out, f) for f in self.fields)


def ids(gen, vocab, *shape):
    return torch.randint(0, vocab, shape, generator=gen, dtype=torch.int64)


def padding_mask(batch, seq):
    # The second sequence is padded at the end: real models see masks with zeros.
    m = torch.ones(batch, seq, dtype=torch.int64)
    m[1:, seq - seq // 4:] = 0
    return m


def gpt2(gen):
    from transformers import GPT2Config, GPT2LMHeadModel
    # GPT-2 with its own attention (matmul, mask, softmax): run_decompositions() fails on
    # its sdpa path in PyTorch 2.11 (a view of sdpa's transposed output), and the eager
    # path is what many users export anyway. sdpa is covered by BERT, Llama and ViT.
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=96, n_positions=32,
                     bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    model = GPT2LMHeadModel(cfg)
    x = ids(gen, cfg.vocab_size, 2, 12)
    return (Outputs(model, ["input_ids", "attention_mask"], ["logits"], use_cache=False),
            (x, padding_mask(2, 12)), cfg)


def bert(gen):
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, vocab_size=96, max_position_embeddings=32,
                     type_vocab_size=2, attn_implementation="sdpa")
    model = BertModel(cfg)
    x = ids(gen, cfg.vocab_size, 2, 12)
    types = torch.zeros(2, 12, dtype=torch.int64)
    types[:, 6:] = 1
    return (Outputs(model, ["input_ids", "attention_mask", "token_type_ids"],
                    ["last_hidden_state", "pooler_output"]),
            (x, padding_mask(2, 12), types), cfg)


def llama(gen):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
                      max_position_embeddings=64, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    x = ids(gen, cfg.vocab_size, 2, 12)
    return Outputs(model, ["input_ids"], ["logits"], use_cache=False), (x,), cfg


def t5(gen):
    from transformers import T5Config, T5EncoderModel
    cfg = T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=96,
                   relative_attention_num_buckets=16, relative_attention_max_distance=32,
                   feed_forward_proj="relu")
    model = T5EncoderModel(cfg)
    x = ids(gen, cfg.vocab_size, 2, 12)
    return (Outputs(model, ["input_ids", "attention_mask"], ["last_hidden_state"]),
            (x, padding_mask(2, 12)), cfg)


def vit(gen):
    from transformers import ViTConfig, ViTForImageClassification
    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=64, num_labels=10,
                    attn_implementation="sdpa")
    model = ViTForImageClassification(cfg)
    x = torch.randn(2, 3, 32, 32, generator=gen)
    return Outputs(model, ["pixel_values"], ["logits"]), (x,), cfg


class TinyResNet(torch.nn.Module):
    """torchvision's ResNet with its own BasicBlock and Bottleneck, at small widths."""

    def __init__(self, width=1):
        super().__init__()
        from torchvision.models.resnet import ResNet, BasicBlock
        self.net = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)
        # Narrow every layer: rebuild with the same structure and width/8 of the width.
        w = 8 * width
        self.net.inplanes = w
        self.net.conv1 = torch.nn.Conv2d(3, w, kernel_size=7, stride=2, padding=3, bias=False)
        self.net.bn1 = torch.nn.BatchNorm2d(w)
        self.net.layer1 = self.net._make_layer(BasicBlock, w, 1)
        self.net.layer2 = self.net._make_layer(BasicBlock, 2 * w, 1, stride=2)
        self.net.layer3 = self.net._make_layer(BasicBlock, 4 * w, 1, stride=2)
        self.net.layer4 = self.net._make_layer(BasicBlock, 8 * w, 1, stride=2)
        self.net.fc = torch.nn.Linear(8 * w, 10)
        # Random running statistics, so batch norm is not the identity.
        for m in self.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x):
        return (self.net(x),)


def resnet(gen):
    return TinyResNet(), (torch.randn(2, 3, 64, 64, generator=gen),), {"widths": [8, 16, 32, 64]}


class MobileNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        from torchvision.models import mobilenet_v2
        self.net = mobilenet_v2(width_mult=0.25, num_classes=10)
        self.net.classifier[1] = torch.nn.Linear(self.net.last_channel, 10)
        for m in self.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return (self.net(x),)


def mobilenet(gen):
    return MobileNet(), (torch.randn(2, 3, 32, 32, generator=gen),), {"width_mult": 0.25}


def realistic_models():
    """Realistic input sizes, narrow configs: (module, inputs, config, id ranges)."""
    from transformers import (BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                              LlamaForCausalLM, T5Config, T5EncoderModel, ViTConfig,
                              ViTForImageClassification)
    gen = torch.Generator().manual_seed(0)
    b, n, vocab = 8, 512, 1024
    tokens = ids(gen, vocab, b, n)
    ones = torch.ones(b, n, dtype=torch.int64)
    image = torch.randn(b, 3, 224, 224, generator=gen)
    gpt = GPT2Config(n_layer=4, n_embd=128, n_head=2, vocab_size=vocab, n_positions=n,
                     bos_token_id=0, eos_token_id=0, attn_implementation="sdpa")
    bert_cfg = BertConfig(hidden_size=128, num_hidden_layers=4, num_attention_heads=2,
                          intermediate_size=512, vocab_size=vocab, max_position_embeddings=n,
                          type_vocab_size=2, attn_implementation="sdpa")
    llama_cfg = LlamaConfig(hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                            num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab,
                            max_position_embeddings=n, attn_implementation="sdpa")
    t5_cfg = T5Config(d_model=128, d_kv=32, d_ff=512, num_layers=4, num_heads=4, vocab_size=vocab,
                      feed_forward_proj="relu")
    vit_cfg = ViTConfig(image_size=224, patch_size=16, hidden_size=192, num_hidden_layers=2,
                        num_attention_heads=3, intermediate_size=768, num_labels=10,
                        attn_implementation="sdpa")
    from torchvision.models import mobilenet_v2
    mobile = mobilenet_v2(width_mult=0.5, num_classes=10)
    return {
        "gpt2": (Outputs(GPT2LMHeadModel(gpt), ["input_ids"], ["logits"], use_cache=False),
                 (tokens,), gpt, [vocab]),
        "bert": (Outputs(BertModel(bert_cfg), ["input_ids", "attention_mask"], ["last_hidden_state"]),
                 (tokens, ones), bert_cfg, [vocab, 2]),
        "llama": (Outputs(LlamaForCausalLM(llama_cfg), ["input_ids"], ["logits"], use_cache=False),
                  (tokens,), llama_cfg, [vocab]),
        "t5_encoder": (Outputs(T5EncoderModel(t5_cfg), ["input_ids", "attention_mask"],
                               ["last_hidden_state"]), (tokens, ones), t5_cfg, [vocab, 2]),
        "vit": (Outputs(ViTForImageClassification(vit_cfg), ["pixel_values"], ["logits"]),
                (image,), vit_cfg, [None]),
        "resnet": (TinyResNet(width=2), (image,), {"widths": [16, 32, 64, 128]}, [None]),
        "mobilenet_v2": (Tuple(mobile), (image,), {"width_mult": 0.5}, [None]),
    }


class Tuple(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return (self.net(x),)


def export_realistic(out, only):
    for name, (module, inputs, cfg, ranges) in realistic_models().items():
        if only and name not in only:
            continue
        module = module.eval().to("cuda")
        inputs = tuple(x.to("cuda") for x in inputs)
        with torch.no_grad():
            exported = torch.export.export(module, inputs)
        base = os.path.join(out, name)
        torch.export.save(exported, base + ".pt2")
        meta = {
            "torch_version": torch.__version__,
            "config": cfg.to_dict() if hasattr(cfg, "to_dict") else cfg,
            "parameters": sum(p.numel() for p in module.parameters()),
            "inputs": [{"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""),
                        **({"high": r} if r is not None else {})}
                       for x, r in zip(inputs, ranges)],
            "outputs": [],
        }
        with open(base + ".json", "w") as f:
            json.dump(meta, f, indent=1, default=str)
            f.write("\n")
        print(f"wrote {base}.pt2 ({meta['parameters']} parameters)")


ZOO = {
    "gpt2": gpt2,
    "bert": bert,
    "llama": llama,
    "t5_encoder": t5,
    "vit": vit,
    "resnet": resnet,
    "mobilenet_v2": mobilenet,
}


def census(program):
    ops = collections.Counter()
    for node in program.graph.nodes:
        if node.op == "call_function":
            ops[str(node.target)] += 1
    return dict(sorted(ops.items()))


def to_float64(module, inputs):
    module = module.to(torch.float64)
    return module, tuple(x.to(torch.float64) if x.is_floating_point() else x for x in inputs)


def export_one(name, factory, out, show_census):
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    module, inputs, cfg = factory(gen)
    module = module.eval()
    with torch.no_grad():
        exported = torch.export.export(module, inputs)
        core = exported.run_decompositions()
        # A copy: the exported program shares the module's parameters, which must be
        # saved in their own dtype.
        ref_module, ref_inputs = to_float64(copy.deepcopy(module), inputs)
        reference = ref_module(*ref_inputs)
    base = os.path.join(out, name)
    torch.export.save(exported, base + ".pt2")
    torch.export.save(core, base + "_core.pt2")
    for i, x in enumerate(inputs):
        write(f"{base}.input{i}.bin", x)
    for i, y in enumerate(reference):
        write(f"{base}.expected{i}.bin", y, torch.float32)
    meta = {
        "torch_version": torch.__version__,
        "config": cfg.to_dict() if hasattr(cfg, "to_dict") else cfg,
        "parameters": sum(p.numel() for p in module.parameters()),
        "inputs": [{"file": f"{name}.input{i}.bin", "shape": list(x.shape),
                    "dtype": str(x.dtype).replace("torch.", "")} for i, x in enumerate(inputs)],
        "outputs": [{"file": f"{name}.expected{i}.bin", "shape": list(y.shape),
                     "dtype": "float32", "computed_in": "float64, rounded to float32"}
                    for i, y in enumerate(reference)],
        "ops": {"exported": census(exported), "core": census(core)},
    }
    with open(base + ".json", "w") as f:
        json.dump(meta, f, indent=1, default=str)
        f.write("\n")
    if show_census:
        for form in ("exported", "core"):
            print(f"{name} ({form}):")
            for op, n in meta["ops"][form].items():
                print(f"  {n:4d} {op}")
    print(f"wrote {base}.pt2 and {base}_core.pt2 ({meta['parameters']} parameters)")


def skeleton(out):
    import zipfile
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="sdpa")).eval()
    module = Outputs(model, ["input_ids"], ["logits"], use_cache=False)
    x = torch.randint(0, 50257, (1, 128), dtype=torch.int64)
    with torch.no_grad():
        exported = torch.export.export(module, (x,))
    full = os.path.join(out, "gpt2_small.full.pt2")
    torch.export.save(exported, full)
    sizes = {}
    with zipfile.ZipFile(full) as src, \
            zipfile.ZipFile(os.path.join(out, "gpt2_small.skeleton.pt2"), "w") as dst:
        for info in src.infolist():
            if "/data/weights/" in info.filename and not info.filename.endswith(".json"):
                sizes[info.filename] = info.file_size
                dst.writestr(info.filename, b"")
            else:
                dst.writestr(info.filename, src.read(info.filename))
    os.remove(full)
    with open(os.path.join(out, "gpt2_small.weights.json"), "w") as f:
        json.dump({"parameters": sum(p.numel() for p in model.parameters()),
                   "members": sizes}, f, indent=1)
        f.write("\n")
    print(f"wrote gpt2_small.skeleton.pt2 ({len(sizes)} weights emptied)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--only", action="append", choices=sorted(ZOO))
    p.add_argument("--census", action="store_true")
    p.add_argument("--skeleton", action="store_true")
    p.add_argument("--realistic", action="store_true")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.realistic:
        export_realistic(a.out, a.only)
        return
    failed = []
    if a.skeleton:
        skeleton(a.out)
    for name in a.only or ZOO:
        try:
            export_one(name, ZOO[name], a.out, a.census)
        except Exception as e:  # report every model, then fail
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
            failed.append(name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
