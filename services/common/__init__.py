"""What the sample pipeline's services share: the message contract, blobs and start-up."""
