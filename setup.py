"""Packaging for partf: PAR Transformer-XL and efficient attentions in Keras 3."""

from pathlib import Path

from setuptools import find_packages, setup

# tensorflow-text ships compiled ops for exactly one TensorFlow minor version,
# so both are pinned to the same minor release.
TF_MINOR = "2.21"

setup(
    name="partf",
    version="0.1.0",
    description=(
        "Pay-Attention-when-Required Transformer-XL and efficient attentions in TensorFlow/Keras 3"
    ),
    long_description=(Path(__file__).parent / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10,<3.13",
    packages=find_packages(include=["partf", "partf.*"]),
    # The copy of WikiText-2 (3.3 MB) and its license go into the wheel and the sdist, so
    # an installed partf builds WikiText-2's records with no network, as a checkout does.
    package_data={"partf.data": ["wikitext2/wikitext-2.tar.xz", "wikitext2/README.md"]},
    install_requires=[
        f"tensorflow~={TF_MINOR}.0",
        f"tensorflow-text~={TF_MINOR}.0",
        "keras>=3.10,<4",
        "sentencepiece>=0.2",
        "tensorboard",
        "numpy",
        "absl-py",
        "matplotlib",
        "pillow",
        'tomli>=1.1; python_version < "3.11"',  # partf-study's plans (tomllib from 3.11)
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5",  # scripts/run_tests.sh spreads the files over the cores
            "ruff>=0.6",
            "nbclient>=0.10",
            "nbformat>=5.10",
            "ipykernel",
            # The JAX-backend test (tests/test_jax_backend.py) skips without it.
            "jax[cpu]>=0.10,<0.11",
            # partf-export's LiteRT tests (tests/export/) run its interpreter.
            "ai-edge-litert>=2.0",
        ],
        # partf-export --format litert, and decode.py on a model.tflite.
        "export": ["ai-edge-litert>=2.0"],
        # benchmarks/export_speed.py's peer: keras-hub's GPT-2 generate.
        "benchmarks": ["keras-hub>=0.32"],
        "gpu": [f"tensorflow[and-cuda]~={TF_MINOR}.0"],
    },
    entry_points={
        "console_scripts": [
            "partf-build-data=partf.cli.build_data:run",
            "partf-train=partf.cli.train:run",
            "partf-generate=partf.cli.generate:run",
            "partf-evaluate=partf.cli.evaluate:run",
            "partf-export=partf.cli.export:run",
            "partf-study=partf.cli.study:run",
        ],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
