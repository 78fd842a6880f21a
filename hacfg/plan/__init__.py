"""What a configuration will cost before the job is submitted: failures, the checkpoint interval,
wall time, ETTR and the restart budget (:mod:`hacfg.plan.model`), from the inputs a scenario file
states, published defaults or what the agent measured (:mod:`hacfg.plan.inputs`)."""
