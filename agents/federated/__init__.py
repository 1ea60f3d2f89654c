"""Federated learning where clients are objectives: FedAvg, FedProx, FedMGDA+, MGDA,
linearisation and MosT share one client update (:mod:`morl.agents.federated.client`), one server
loop (:mod:`morl.agents.federated.simulator`) and two engines (in-process vectorised; Flower)."""
