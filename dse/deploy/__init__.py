"""Launch files for a study's design: `dse deploy NAME --engine {sglang,trtllm,vllm,dynamo}`.

For the best design of a study's run (or a trial's), one launch script per pool with the engine's
own flags (tensor, expert and data-parallel attention sizes, the running-request cap, the chunked
prefill budget, MTP drafts, the KV-cache precision), the instance counts, a Dynamo graph for
Dynamo, and a README stating what was assumed:

- :mod:`dse.deploy.design`: what the launch needs of the study's design, read from a trial's record;
- :mod:`dse.deploy.engines`: each engine's flags (``engine_flags.toml`` cites where each was read);
- :mod:`dse.deploy.scripts`: the launch scripts, the router, the Dynamo graph, ``instances.json``;
- :mod:`dse.deploy.readme`: the README;
- :mod:`dse.deploy.files`: the files whole, and their folder written in one swap.
"""
