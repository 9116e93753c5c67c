package memory

// SplitText exposes splitText to the external tests.
var SplitText = splitText
