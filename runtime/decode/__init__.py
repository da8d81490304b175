"""The decoding loop (decoding.py) over an engine's decoder state (decoder_state.py): the searches (search.py,
top_candidates.py), the logit filters (logit_filters.py), constraints (constraints.py) and alignments from the
attention (alignment.py). It runs on numpy and whatever the engine hands back; it opens no file and no session."""
