"""partf-train's settings and the attention mechanisms' options, as plain values.

Written by `python -m partf.cli.make_flag_table` from `TrainConfig`, `ModelConfig` and
the attention classes the source declares (partf.declarations); do not edit by hand.
partf-train builds its parser from these, so `--help` and flag errors need neither Keras
nor TensorFlow; tests/cli/test_quiet.py checks that they still equal their sources.
"""

from typing import Any

from partf.cli.flags import Setting

TRAIN_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "train_directory",
        "str",
        "data/wikitext2_bsz32_seqlen32_tfrecords_train",
        "folder of training .tfrecords",
        group="data",
    ),
    Setting(
        "valid_directory",
        "str",
        "data/wikitext2_bsz32_seqlen32_tfrecords_valid",
        "folder of validation .tfrecords ('' to skip validation)",
        group="data",
    ),
    Setting(
        "test_directory",
        "str",
        "data/wikitext2_bsz32_seqlen32_tfrecords_test",
        "folder of test .tfrecords ('' to skip the test)",
        group="data",
    ),
    Setting(
        "sp_model_prefix",
        "str",
        "data/tokenizer/wiki2_12k",
        "SentencePiece model prefix; gives the vocabulary size when the records carry no "
        "metadata.json",
        group="data",
    ),
    Setting(
        "model_name", "str", "partf", "name of the run's logs, checkpoints and plots", group="run"
    ),
    Setting("output_dir", "str", ".", "root of logs/, checkpoints/, plots/", group="run"),
    Setting("epochs", "int", 20, "passes over the training data", group="optimization"),
    Setting(
        "max_steps", "int", None, "stop after this many steps (default: all)", group="optimization"
    ),
    Setting(
        "objective",
        "str",
        "causal",
        "causal (next-token prediction, the PAR Transformer-XL) or mlm (masked language "
        "modelling with the bidirectional Encoder: 15% of tokens chosen, 80/10/10 "
        "mask/random/keep; needs records built with partf-build-data --mask_symbol; without "
        "--architecture a PAR search over non-causal candidates; mem_len, cutoffs and the "
        "sampled or cost-aware search do not apply)",
        group="optimization",
        choices=("causal", "mlm"),
    ),
    Setting("max_lr", "float", 0.0001, "peak learning rate", group="optimization"),
    Setting("warmup_steps", "int", 4000, "linear warm-up steps", group="optimization"),
    Setting(
        "lr_schedule",
        "str",
        "cosine",
        "cosine (warm-up then cosine to zero), inverse_sqrt or constant",
        group="optimization",
    ),
    Setting("opt_name", "str", "adam", "Keras optimizer name", group="optimization"),
    Setting(
        "clipvalue",
        "float",
        0.0,
        "clip gradient elements to +-clipvalue (0: none)",
        group="optimization",
    ),
    Setting(
        "weight_decay",
        "float",
        None,
        "decoupled weight decay (default: the optimizer's)",
        group="optimization",
    ),
    Setting(
        "arch_lr",
        "float",
        None,
        "own learning rate of the architecture logits (PAR paper: 1e-2; default: shared)",
        group="optimization",
    ),
    Setting(
        "arch_weight_decay",
        "float",
        None,
        "own weight decay of the architecture logits (PAR paper: 5e-4; default: shared)",
        group="optimization",
    ),
    Setting(
        "arch_freeze_steps",
        "int",
        0,
        "steps before the architecture logits learn (PAR paper: 10000)",
        group="optimization",
    ),
    Setting(
        "arch_freeze_fraction",
        "float",
        None,
        "fraction of the run before the architecture logits learn (overrides "
        "--arch_freeze_steps; --search=par: 0.5)",
        group="optimization",
    ),
    Setting(
        "search",
        "str",
        "original",
        "architecture-search preset: original (the original project's: its clipped "
        "probabilities, --arch_parameterization=probabilities, sharing the model's optimizer) "
        "or par (own rate 3e-2, weight decay 5e-4, frozen for the first half of the run: the "
        "settings that converge, README 'The PAR search'); --arch_* flags given win",
        group="optimization",
        choices=("original", "par"),
    ),
    Setting(
        "init_from",
        "str",
        None,
        "start from the weights of a finished run (its checkpoints/NAME folder) wherever the "
        "block types match: a fine-tune, a conversion or a search begun from a trained model; "
        "blocks align by index, or with the source's non-identity blocks when this model has "
        "fewer; a resumed run reads its own checkpoint instead",
        group="optimization",
    ),
    Setting(
        "drop_attention",
        "int",
        0,
        "with --init_from: replace by the identity the N attention blocks of the source whose "
        "removal raises its validation loss least (scored without training), then train the "
        "rest from its weights (0: off)",
        group="optimization",
    ),
    Setting("steps_per_execution", "int", 32, "train steps per compiled call", group="run"),
    Setting("jit_compile", "bool", True, "compile the train step with XLA", group="run"),
    Setting(
        "compiled_loop",
        "bool",
        False,
        "JAX: run each call's --steps_per_execution steps as one compiled loop (jax.lax.scan) "
        "instead of Keras's Python loop of compiled steps",
        group="run",
    ),
    Setting(
        "mixed_precision", "bool", False, "float16 (GPU) / bfloat16 (CPU) compute", group="run"
    ),
    Setting("seed", "int", 0, "random seed (weights, dropout and Gumbel noise)", group="run"),
    Setting(
        "distribution_strategy",
        "str",
        "default",
        "tf.distribute strategy: mirrored (local devices), multi_worker (TF_CONFIG), tpu; each "
        "replica keeps its own rows and memory (docs/scaling.md)",
        group="run",
        choices=("default", "mirrored", "multi_worker", "tpu"),
    ),
    Setting(
        "log_every", "int", 100, "steps between logged losses and TensorBoard scalars", group="run"
    ),
    Setting("eval_every", "int", 0, "steps between validations (0: each epoch)", group="run"),
    Setting("ckpt_every", "int", 0, "steps between checkpoints (0: each epoch)", group="run"),
    Setting(
        "ckpt_min_seconds",
        "float",
        0.0,
        "least seconds between two --ckpt_every checkpoints, for a plan shared by slow and "
        "fast machines (0: no limit; epoch ends and signals always save)",
        group="run",
    ),
    Setting("plot_every", "int", 1000, "steps between pi heatmaps", group="run"),
    Setting("keep_checkpoints", "int", 5, "how many newest checkpoints to keep", group="run"),
    Setting(
        "overwrite",
        "bool",
        False,
        "discard this model_name's logs, checkpoints and plots instead of resuming",
        group="run",
    ),
    Setting(
        "spike_guard",
        "str",
        "off",
        "a step whose loss is a spike (> --spike_factor x running mean, or NaN): skip it, or "
        "stop the run; counted in training.log and TensorBoard",
        group="run",
        choices=("off", "skip", "stop"),
    ),
    Setting("spike_factor", "float", 2.0, "loss spike threshold over the mean", group="run"),
    Setting("spike_warmup", "int", 100, "steps before the spike guard judges", group="run"),
)

MODEL_SETTINGS: tuple[Setting, ...] = (
    Setting("d_model", "int", 128, "embedding and hidden width"),
    Setting("num_heads", "int", 4, "attention heads"),
    Setting("d_ffn", "int", 512, "feed-forward inner width"),
    Setting("mem_len", "int", 16, "XL memory length per block (0: no memory)"),
    Setting("dropout_rate", "float", 0.1, "dropout rate (embeddings, attention, dense outputs)"),
    Setting(
        "straight_through",
        "bool",
        False,
        "straight-through Gumbel-softmax (one-hot block weights forward, soft gradients)",
    ),
    Setting("clamp_len", "int", None, "largest relative distance encoded (unset: no clamp)"),
    Setting("attention", "str", "relative", "attention mechanism of the 'attention' candidate"),
    Setting(
        "eval_mode", "str", "argmax", "block weights at evaluation: argmax, expected or sample"
    ),
    Setting("sample_per_example", "bool", False, "one Gumbel sample per example, not per step"),
    Setting(
        "arch_parameterization",
        "str",
        "logits",
        "architecture parameters: logits (pi = their softmax) or probabilities (the original "
        "project's clipped, unnormalised probabilities from [0.33, 0.33, 0.34], read as "
        "log(max(p, 0) + 1e-5))",
        choices=("logits", "probabilities"),
    ),
    Setting("num_layers", "int", 6, "stochastic blocks"),
    Setting(
        "cutoffs",
        "ints",
        (250, 2500),
        "adaptive softmax cutoffs without the vocabulary size, repeatable or comma-separated "
        "(--cutoffs= for a plain softmax)",
    ),
    Setting("proj_factor", "int", 4, "tail cluster i projects to d_model/proj_factor**i"),
    Setting(
        "proj_dims", "ints", None, "explicit tail projection widths, one per cluster (repeatable)"
    ),
    Setting("tie_embeddings", "bool", False, "tie output and input embeddings (plain softmax)"),
    Setting(
        "candidates",
        "names",
        ("attention", "dense", "identity"),
        "per-block choices, comma-separated or repeated",
    ),
    Setting(
        "architecture",
        "str",
        None,
        "fixed architecture such as 'A A D D D I' (no search), searched blocks among the "
        "candidates joined by '|' ('A|I D|I ...': each such block its own search), or a "
        "preset: plain (A D A D ...), transnormer (diag then norm attention, dense between), "
        "primal_hybrid (softmax then one primal attention, dense between)",
    ),
    Setting("tau_start", "float", 1.0, "initial Gumbel temperature"),
    Setting("tau_end", "float", 0.1, "final Gumbel temperature (after tau_steps)"),
    Setting(
        "tau_schedule",
        "str",
        "exponential",
        "tau annealing: exponential, linear, cosine or constant",
    ),
    Setting(
        "search_estimator",
        "str",
        "mixture",
        "how a search trains: mixture (every candidate runs, Gumbel-softmax weights, the "
        "original's) or sampled (one candidate per block drawn from pi runs per step; the "
        "logits learn from a score-function estimate)",
        choices=("mixture", "sampled"),
    ),
    Setting(
        "search_cost_weight",
        "float",
        0.0,
        "lambda of the cost-aware search: adds lambda x the expected cost per token of the "
        "architecture drawn from pi to the loss, in the unit of --search_cost (0: off)",
    ),
    Setting(
        "search_cost",
        "str",
        "flops",
        "the cost-aware search's cost: flops (forward MFLOPs per token, counted) or time "
        "(forward-and-backward microseconds per token of each candidate, measured on this "
        "machine at the run's batch shape when it begins, kept in cost_table.json beside it)",
        choices=("flops", "time"),
    ),
    Setting(
        "position",
        "str",
        "none",
        "token positions: none; sinusoidal or learned (added to the embeddings); rotary "
        "(inside each attention that has a query-key product); auto (the measured best for the "
        "chosen mechanisms; relative attention keeps its own encoding)",
        choices=("none", "sinusoidal", "learned", "rotary", "auto"),
    ),
    Setting(
        "max_positions",
        "int",
        16384,
        "learned positions: rows of the table; a stream (one row of the context batch, an "
        "epoch long) must stay shorter",
    ),
    Setting("tau_is_trainable", "bool", False, "learn tau instead of following the schedule"),
)

MECHANISM_OPTIONS: dict[str, dict[str, tuple[Any, str]]] = {
    "diag": {
        "window_size": (64, "local: previous tokens each query sees; diag, eva: tokens per window"),
        "diag_activation": ("relu", "diag: score activation within a block (relu, softmax)"),
        "norm_type": ("simple_rms", "norm/diag: output normalisation (simple_rms, layer, none)"),
        "rms_form": (
            "authors",
            "norm/diag: simple_rms form, authors (x / (rms + 1e-8), TransNormer's code) or "
            "partf (x / sqrt(mean square + 1e-6))",
        ),
    },
    "eva": {
        "window_size": (
            128,
            "local: previous tokens each query sees; diag, eva: tokens per window",
        ),
        "chunk_size": (
            8,
            "tokens per chunk (linear attentions: speed only; eva: tokens per summary)",
        ),
        "mem_chunks": (64, "eva: chunk summaries before its window each query sees"),
        "overlap_window": (False, "eva: the exact part also covers the previous window"),
        "adaptive_proj": ("qk", "eva: proposal maps, qk (linear + layer norm) or no-ln (linear)"),
        "use_t5_rpe": (False, "eva: learned T5 relative position bias on the exact window"),
        "chunk_mask": (
            "authors",
            "eva: chunks a query sees, authors (the authors' causal mask: also its exact "
            "part's chunks before its own) or partf (only those before its exact part); "
            "non-causal: the same mask",
        ),
    },
    "fastformer": {
        "chunk_size": (
            64,
            "tokens per chunk (linear attentions: speed only; eva: tokens per summary)",
        ),
        "convolve": (False, "fastformer: a causal convolution before the additive attention"),
        "groups": (2, "fastformer: channel groups of the convolution"),
        "kernel_size": (4, "fastformer: taps of the causal convolution"),
        "conv_form": (
            "seed",
            "fastformer: the convolution, seed (layer norm, then no bias) or partf (bias, then "
            "GELU)",
        ),
    },
    "lara": {
        "num_landmarks": (16, "lara: landmarks (segments, one proposal each)"),
        "alpha_coeff": (1.0, "lara: weight of the query-dependent mixing weights"),
    },
    "linear": {
        "chunk_size": (
            64,
            "tokens per chunk (linear attentions: speed only; eva: tokens per summary)",
        ),
    },
    "local": {
        "window_size": (
            128,
            "local: previous tokens each query sees; diag, eva: tokens per window",
        ),
    },
    "norm": {
        "chunk_size": (
            64,
            "tokens per chunk (linear attentions: speed only; eva: tokens per summary)",
        ),
        "feature_map": ("elu", "norm: feature map of queries and keys (elu, elu+1, relu)"),
        "norm_type": ("simple_rms", "norm/diag: output normalisation (simple_rms, layer, none)"),
        "rms_form": (
            "authors",
            "norm/diag: simple_rms form, authors (x / (rms + 1e-8), TransNormer's code) or "
            "partf (x / sqrt(mean square + 1e-6))",
        ),
    },
    "performer": {
        "num_features": (128, "random features per head (performer)"),
        "redraw": (False, "performer: draw new random features for each new stream in training"),
        "chunk_size": (
            64,
            "tokens per chunk (linear attentions: speed only; eva: tokens per summary)",
        ),
    },
    "primal": {
        "low_rank": (30, "primal: rank s of the KSVD projections"),
        "eta": (0.1, "primal: weight of the KSVD regulariser in the loss"),
    },
    "relative": {
        "mem_len": (0, "memory length; the model sets it from --mem_len"),
        "clamp_len": (None, "largest relative distance encoded (None: no clamp)"),
        "attention_dropout_rate": (0.0, "dropout on the attention weights (dropatt)"),
        "compat": (
            "transformer_xl",
            "transformer_xl (scores / sqrt(Dh), linear output) or original (the original PAR "
            "project's scores / Dh, biases and ReLU output)",
        ),
        "query_chunk": (
            0,
            "causal: score queries this many at a time against only the keys they can see (0: "
            "all at once; docs/speed.md measures 64 at 256 tokens)",
        ),
    },
    "softmax": {
        "mem_len": (0, "previous tokens whose keys and values are kept as memory (0: none)"),
    },
}
