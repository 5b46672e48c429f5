"""Decoding, BLEU and the attention plot for the translation example.

    python examples/translation/evaluate.py --output_dir runs/translation_de_en

Translates a Multi30k split with the trained model (beam search by default,
`--num_beams 1` for greedy), scores it with sacrebleu against the raw
references, and draws the encoder-decoder attention of one sentence, one
panel per head. `train.py` calls `report` at the end of training.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import quiet  # noqa: E402,F401  (first: TensorFlow's start-up logs only with --verbose)

# isort: split

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from multi30k import load_multi30k  # noqa: E402

from keras_attn.generation import CachedDecoder, beam_search, greedy_search  # noqa: E402
from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer  # noqa: E402
from keras_attn.preprocessing.text import encode_source  # noqa: E402


def make_translate_fn(model, tokenizer, max_length, num_beams=4, length_penalty_alpha=0.6):
    """A compiled function: (B,) source strings -> (B, max_length) target ids.

    Sources are tokenized as in training (`encode_source`: truncated to
    `max_length`, end id appended) and padded to `max_length`, so one trace
    serves every batch.
    """
    decoder = CachedDecoder(model)

    @tf.function(input_signature=[tf.TensorSpec((None,), tf.string)], reduce_retracing=True)
    def translate(text):
        tokens = encode_source(tokenizer, text, max_length)
        tokens = tokens.to_tensor(default_value=0, shape=[None, max_length])
        start = tf.fill([tf.shape(tokens)[0], 1], tokenizer.start_id)
        inputs = {"encoder_tokens": tokens}
        # Padding and the start id are never generated.
        suppressed = (tokenizer.pad_id, tokenizer.start_id)
        if num_beams == 1:
            return greedy_search(
                decoder,
                start,
                max_length,
                end_token_id=tokenizer.end_id,
                inputs=inputs,
                suppressed_token_ids=suppressed,
            )
        return beam_search(
            decoder,
            start,
            max_length,
            num_beams=num_beams,
            length_penalty_alpha=length_penalty_alpha,
            end_token_id=tokenizer.end_id,
            inputs=inputs,
            suppressed_token_ids=suppressed,
        )

    return translate


def translate_sentences(translate, tokenizer, sentences, batch_size=64, progress=1):
    """Translates a list of strings in batches, with a progress bar (as
    `--progress`: 1 a bar, 2 one line at the end, 0 none)."""
    outputs = []
    bar = keras.utils.Progbar(len(sentences), unit_name="sentence", verbose=progress)
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start : start + batch_size]
        ids = translate(tf.constant(batch))
        outputs.extend(t.decode("utf-8") for t in tokenizer.detokenize(ids).numpy())
        bar.add(len(batch))
    return outputs


def cross_attention_maps(model, encoder_tokens, decoder_tokens, layer_index=-1):
    """Encoder-decoder attention of one decoder block, (B, H, T, S).

    Runs the trained functional model up to the chosen block's inputs, then
    calls that block again with `return_attention_scores=True`.
    """
    blocks = [layer for layer in model.layers if layer.name.startswith("decoder_layer_")]
    block = blocks[layer_index]
    decoder_sequence, encoder_sequence = block.input[:2]
    feed = keras.Model(model.inputs, [decoder_sequence, encoder_sequence])
    inputs = {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}
    x, memory = feed(inputs)
    _, scores = block(
        x,
        memory,
        decoder_padding_mask=np.not_equal(decoder_tokens, 0),
        encoder_padding_mask=np.not_equal(encoder_tokens, 0),
        return_attention_scores=True,
    )
    return np.asarray(scores["cross_attention"])


def plot_attention(model, tokenizer, source, translation_ids, path, max_length):
    """One heatmap per head: rows = generated target pieces, columns = source pieces."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    encoder_tokens = encode_source(tokenizer, tf.constant([source]), max_length).to_tensor().numpy()
    target = [int(t) for t in translation_ids if t not in (0,)]
    if tokenizer.end_id in target:
        target = target[: target.index(tokenizer.end_id) + 1]
    decoder_tokens = np.array([target[:-1] if len(target) > 1 else target])
    scores = cross_attention_maps(model, encoder_tokens, decoder_tokens)[0]

    def pieces(ids):
        return [p.decode("utf-8") for p in tokenizer.id_to_piece(np.asarray(ids)).numpy()]

    source_labels = pieces(encoder_tokens[0])
    target_labels = pieces(target[1:]) if len(target) > 1 else pieces(target)
    heads = scores.shape[0]
    columns = min(heads, 4)
    rows = (heads + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.0 * rows), squeeze=False)
    for h in range(rows * columns):
        axis = axes[h // columns][h % columns]
        if h >= heads:
            axis.axis("off")
            continue
        axis.imshow(scores[h][: len(target_labels)], cmap="viridis", vmin=0.0, vmax=1.0)
        axis.set_title(f"head {h}")
        axis.set_xticks(range(len(source_labels)))
        axis.set_xticklabels(source_labels, rotation=90, fontsize=6)
        axis.set_yticks(range(len(target_labels)))
        axis.set_yticklabels(target_labels, fontsize=6)
    fig.suptitle("encoder-decoder attention, last decoder block")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def report(args, model, tokenizer):
    """Translates the evaluation split, prints and saves BLEU, plots attention."""
    import sacrebleu

    sources, references = load_multi30k(args.data_dir, args.eval_split, args.source, args.target)
    if args.eval_size:
        sources, references = sources[: args.eval_size], references[: args.eval_size]
    results = {}
    strategies = [("beam", args.num_beams)] if args.num_beams > 1 else []
    strategies.append(("greedy", 1))
    for name, beams in strategies:
        translate = make_translate_fn(
            model, tokenizer, args.max_length, beams, args.length_penalty_alpha
        )
        start = time.time()
        hypotheses = translate_sentences(
            translate, tokenizer, sources, args.eval_batch_size, args.progress
        )
        seconds = time.time() - start
        bleu = sacrebleu.corpus_bleu(hypotheses, [references])
        results[name] = {
            "bleu": round(bleu.score, 2),
            "signature": str(bleu),
            "seconds": round(seconds, 1),
            "num_beams": beams,
            "sentences": len(sources),
        }
        print(
            f"{name} (beams={beams}), {len(sources)} sentences of {args.eval_split}: {bleu}  [{seconds:.0f} s]"
        )
        if name == strategies[0][0]:
            with open(os.path.join(args.output_dir, "translations.txt"), "w") as f:
                for src, hyp, ref in zip(sources, hypotheses, references):
                    f.write(f"SRC {src}\nHYP {hyp}\nREF {ref}\n\n")
            ids = translate(tf.constant(sources[:1])).numpy()[0]
            plot_attention(
                model,
                tokenizer,
                sources[0],
                ids,
                os.path.join(args.output_dir, "attention.png"),
                args.max_length,
            )
    results["split"] = args.eval_split
    results["direction"] = f"{args.source}->{args.target}"
    results["parameters"] = int(model.count_params())
    with open(os.path.join(args.output_dir, "bleu.json"), "w") as f:
        json.dump(results, f, indent=2)
    return results


def main(argv=None):
    import train

    # train.py's flags, for a run that is trained and not exported again.
    argv = sys.argv[1:] if argv is None else list(argv)
    args = train.parse_args(
        argv + ["--skip_training", "--skip_export"], description=__doc__.split("\n")[0]
    )
    tokenizer = SubwordTokenizer.from_file(os.path.join(args.output_dir, "tokenizer.model"))
    model = keras.saving.load_model(os.path.join(args.output_dir, "model.keras"))
    report(args, model, tokenizer)


if __name__ == "__main__":
    quiet.run(main)
