"""Task selection and experience processing."""
