"""Greedy decoding of exports through their own decode.py, in a process that cannot
import partf:

    python no_partf.py OUT.npz IDS NEW_TOKENS [TEXT] -- FOLDER...

IDS: the prompt's ids, comma-separated. Saves, per folder i, tokens_i and log_probs_i,
and with TEXT the SavedModel text signature's continuation of it, text_i."""

import importlib.util
import sys

sys.modules["partf"] = None  # any `import partf` now raises ImportError

import numpy as np  # noqa: E402


def main() -> None:
    try:
        import partf  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("partf is importable here")
    split = sys.argv.index("--")
    out, ids, count, *text = sys.argv[1:split]
    prompt, count = [int(i) for i in ids.split(",")], int(count)
    results = {}
    for i, folder in enumerate(sys.argv[split + 1 :]):
        spec = importlib.util.spec_from_file_location(f"decode_{i}", f"{folder}/decode.py")
        client = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(client)
        decoder = client.open_export(folder)
        results[f"tokens_{i}"], results[f"log_probs_{i}"] = client.greedy(decoder, prompt, count)
        if text and decoder.format == "saved_model":
            results[f"text_{i}"] = np.array(client.generate_text(folder, text[0], count))
    np.savez(out, **results)


if __name__ == "__main__":
    main()
