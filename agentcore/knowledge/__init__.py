"""The knowledge core: files to pages to chunks to vectors to cosine top-k."""
