"""Mixture of soft prompts on a frozen encoder, trained with MosT (``morl prompt``)."""
