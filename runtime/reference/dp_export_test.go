package reference

// ZigTables exposes the ziggurat tables to the external tests.
func ZigTables() (k [256]uint32, w, f [256]float32) { return zigK, zigW, zigF }
