package data

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// LoadFiles reads unlabelled images for prediction. Each path is an image
// file — read whatever its name, the format from its contents — or a
// directory, whose image files (the extensions a folder dataset reads,
// hidden files and directories skipped) are read recursively in lexical
// order. Images with at least fit's pixels are fitted as they decode (see
// Fit; the zero Fit keeps them whole). The images have one class, named
// "", and every label 0; LoadFiles returns them with the file each sample
// came from: a file once a sample, several times where its frames are
// samples of their own (Fit.Frame "all"), consecutively; a DICOM object
// without an image is left out (Images.LeftOut). With Fit.Series the
// directories of slices under paths are read, each a series (SeriesDirs),
// and named so.
func LoadFiles(paths []string, fit Fit) (*Images, []string, error) {
	if err := fit.check(); err != nil {
		return nil, nil, err
	}
	files, err := ImageFiles(paths)
	if fit.Series {
		files, err = SeriesDirs(paths)
	}
	if err != nil {
		return nil, nil, err
	}
	m, _, names, _, err := loadUnits("images", files, make([]int64, len(files)), []string{""}, fit)
	if err != nil {
		return nil, nil, err
	}
	m.sourcePaths = nil
	return m, names, nil
}

// ImageFiles lists the files LoadFiles reads for paths, in its order:
// each file as given, each directory's image files recursively in
// lexical order. A caller with more images than memory loads the list a
// part at a time.
func ImageFiles(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("images: no files or directories given")
	}
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		before := len(files)
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if path != p && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() && isImageFile(path) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
		if len(files) == before {
			return nil, fmt.Errorf("images: %s holds no images (%s)", p, imageFiles)
		}
	}
	return files, nil
}
