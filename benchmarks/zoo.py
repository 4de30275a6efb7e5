"""Model zoo check: does every operator configuration of real-world models replay?

For each model (torchvision, timm, Hugging Face transformers; small configurations, random weights) and mode,
builds the model, runs one iteration, extracts its operator configurations and replays each once (forward, and
backward in training), exactly as profiling will (opcost.check). Prints pass/fail per workload with the first
failure's reason, then one SUMMARY line. Target: every configuration replays (replay_failures=0).

    python benchmarks/zoo.py [--modes inference training] [--batch 2] [--only vit deit] [--threads 2]
    python benchmarks/zoo.py --smoke   # one tiny model of each source (SMOKE), both modes: a functional check
"""
from __future__ import annotations

import argparse
import time

from _common import prepare, summary

_BERT = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=256)
_SMALL_VIT = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=256, image_size=64,
                  patch_size=16)

# name -> config entry; small where a family's default is large, so that the zoo runs in minutes on a laptop CPU
ZOO = {
    # torchvision
    "resnet50": {},
    "densenet121": {},
    "efficientnet_b0": {},
    "mobilenet_v3_small": {},
    "vit_b_16": {"kwargs": {"image_size": 64}, "input_shapes": [[3, 64, 64]]},
    "swin_t": {"input_shapes": [[3, 64, 64]]},
    "convnext_tiny": {"input_shapes": [[3, 64, 64]]},
    "regnet_y_400mf": {},
    "shufflenet_v2_x0_5": {},
    "inception_v3": {"kwargs": {"aux_logits": False, "init_weights": False}, "input_shapes": [[3, 299, 299]]},
    "squeezenet1_0": {},
    "maxvit_t": {},
    # timm
    "timm_vit_tiny": {"model": "timm:vit_tiny_patch16_224"},
    "timm_deit_tiny": {"model": "timm:deit_tiny_distilled_patch16_224"},
    "timm_convnext_atto": {"model": "timm:convnext_atto"},
    "timm_mixer": {"model": "timm:mixer_s32_224"},
    "timm_efficientvit": {"model": "timm:efficientvit_b0"},
    "timm_resnet18d": {"model": "timm:resnet18d"},
    "timm_resnet26t": {"model": "timm:resnet26t"},
    "timm_regnetx": {"model": "timm:regnetx_002"},
    "timm_mobilenetv3": {"model": "timm:mobilenetv3_small_050"},
    "timm_efficientnet": {"model": "timm:efficientnet_b0"},
    "timm_swin": {"model": "timm:swin_tiny_patch4_window7_224", "kwargs": {"depths": [1, 1, 1, 1]}},
    "timm_levit": {"model": "timm:levit_128s"},
    "timm_poolformer": {"model": "timm:poolformer_s12"},
    # Hugging Face transformers
    "hf_bert": {"model": "hf:BertModel", "kwargs": _BERT, "seq_len": 64},
    "hf_gpt2": {"model": "hf:GPT2LMHeadModel", "kwargs": dict(n_layer=2, n_embd=128, n_head=2), "seq_len": 64},
    "hf_t5_encoder": {"model": "hf:T5EncoderModel",
                      "kwargs": dict(num_layers=2, d_model=128, num_heads=2, d_ff=256, d_kv=32), "seq_len": 64},
    "hf_llama": {"model": "hf:LlamaForCausalLM", "kwargs": dict(num_hidden_layers=2, hidden_size=128,
                 num_attention_heads=4, num_key_value_heads=2, intermediate_size=256, vocab_size=1000),
                 "seq_len": 64},
    "hf_vit": {"model": "hf:ViTModel", "kwargs": _SMALL_VIT},
    "hf_distilbert": {"model": "hf:distilbert", "kwargs": dict(n_layers=2, dim=128, n_heads=2, hidden_dim=256),
                      "seq_len": 64},
    "hf_roberta": {"model": "hf:RobertaModel", "kwargs": _BERT, "seq_len": 64},
}

SMOKE = {  # --smoke: one model of each source, as small as its family allows
    "squeezenet1_1": {"input_shapes": [[3, 64, 64]]},
    "timm_test_vit": {"model": "timm:test_vit"},  # timm's test model: a two-block vision transformer
    "hf_bert": {"model": "hf:BertModel", "kwargs": dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                                       intermediate_size=64), "seq_len": 8},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", nargs="+", default=["inference", "training"])
    ap.add_argument("--batch", type=int, default=2,
                    help="batch size (2 and more: expanded inputs, such as a class token, have stride 0)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", nargs="+", help="model names of the zoo to check (default: all)")
    ap.add_argument("--smoke", action="store_true", help="one tiny model of each source (a functional check)")
    args = ap.parse_args()
    prepare(args.threads)

    from opcost.check import check_workload

    zoo = SMOKE if args.smoke else ZOO
    names = args.only or list(zoo)
    results = []
    for name in names:
        for mode in args.modes:
            t0 = time.perf_counter()
            res = check_workload(name, zoo[name], args.batch, mode)
            results.append((name, res))
            status = "pass" if res.ok else f"FAIL ({len(res.replay_failures)} configurations)" \
                if res.error is None else "FAIL"
            print(f"{res.workload:<40} {res.configs:4d} configs {res.calls:5d} calls "
                  f"{time.perf_counter() - t0:6.1f} s  {status}" +
                  (f"  first: {res.first_failure()}" if not res.ok else ""), flush=True)
    failed_models = {name for name, res in results if not res.ok}
    summary(models=len(names), passed=len(names) - len(failed_models), workloads=len(results),
            configs=sum(r.configs for _, r in results),
            replay_failures=sum(len(r.replay_failures) for _, r in results),
            workload_failures=sum(r.error is not None for _, r in results))


if __name__ == "__main__":
    main()
