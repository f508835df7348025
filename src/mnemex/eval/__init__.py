"""The evaluation harness: public benchmarks in, quality metrics and latency out.

Metrics come from ``ir-measures`` (trec_eval underneath, as BEIR uses), an
extra: ``pip install 'mnemex[eval]'``.
"""
