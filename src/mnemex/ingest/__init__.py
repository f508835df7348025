"""Markdown workspaces: chunking (:mod:`.chunk`), the files on disk (:mod:`.files`),
syncing them into the store (:mod:`.workspace`) and watching them (:mod:`.watch`)."""
