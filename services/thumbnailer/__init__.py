"""Thumbnailer: renders a small PNG preview of an uploaded image or a PDF's first page."""
