! pmpi_check_f: Fortran callers (use mpi) of MPI_Allreduce,
! MPI_Reduce_scatter_block, MPI_Allgather and MPI_Iallreduce, with
! MPI_IN_PLACE, and one call the interposer must hand to MPI (MPI_MINLOC).
! Open MPI's Fortran bindings call PMPI_* directly, so only the interposer's
! own Fortran symbols see these calls; fortran_check.sh reads the statistics.
! Prints one line on rank 0; exit status 1 when a check failed.
program pmpi_check_f
  use mpi
  implicit none
  integer :: ierr, rank, nprocs, i, r, fails, total, req, want
  integer :: status(MPI_STATUS_SIZE)
  integer :: ia(10), ib(10)
  double precision :: da(7)
  integer, allocatable :: big(:), part(:), gath(:)
  integer :: pin(2, 5), pout(2, 5)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  fails = 0

  ! MPI_Allreduce, integer sum
  do i = 1, 10
    ia(i) = rank + i
  end do
  call MPI_Allreduce(ia, ib, 10, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (ierr /= MPI_SUCCESS) fails = fails + 1
  do i = 1, 10
    if (ib(i) /= nprocs * (nprocs - 1) / 2 + nprocs * i) fails = fails + 1
  end do

  ! MPI_Allreduce in place, double precision max
  do i = 1, 7
    da(i) = dble(rank * i)
  end do
  call MPI_Allreduce(MPI_IN_PLACE, da, 7, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
  do i = 1, 7
    if (da(i) /= dble((nprocs - 1) * i)) fails = fails + 1
  end do

  ! MPI_Reduce_scatter_block, out of place and in place
  allocate (big(3 * nprocs), part(3), gath(2 * nprocs))
  do i = 1, 3 * nprocs
    big(i) = i + rank
  end do
  call MPI_Reduce_scatter_block(big, part, 3, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, 3
    want = nprocs * (rank * 3 + i) + nprocs * (nprocs - 1) / 2
    if (part(i) /= want) fails = fails + 1
  end do
  call MPI_Reduce_scatter_block(MPI_IN_PLACE, big, 3, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, 3
    want = nprocs * (rank * 3 + i) + nprocs * (nprocs - 1) / 2
    if (big(i) /= want) fails = fails + 1
  end do

  ! MPI_Allgather, out of place and in place
  ia(1) = rank
  ia(2) = -rank
  call MPI_Allgather(ia, 2, MPI_INTEGER, gath, 2, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  do r = 0, nprocs - 1
    if (gath(2 * r + 1) /= r .or. gath(2 * r + 2) /= -r) fails = fails + 1
  end do
  gath = -99
  gath(2 * rank + 1) = 100 + rank
  gath(2 * rank + 2) = 200 + rank
  call MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, gath, 2, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  do r = 0, nprocs - 1
    if (gath(2 * r + 1) /= 100 + r .or. gath(2 * r + 2) /= 200 + r) fails = fails + 1
  end do

  ! MPI_Iallreduce + MPI_Wait, in place
  do i = 1, 10
    ib(i) = i * (rank + 1)
  end do
  call MPI_Iallreduce(MPI_IN_PLACE, ib, 10, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, req, ierr)
  call MPI_Wait(req, status, ierr)
  do i = 1, 10
    if (ib(i) /= i * nprocs * (nprocs + 1) / 2) fails = fails + 1
  end do
  if (req /= MPI_REQUEST_NULL) fails = fails + 1

  ! Handed to MPI: MPI_MINLOC on MPI_2INTEGER
  do i = 1, 5
    pin(1, i) = mod(rank * 7 + i, 3)
    pin(2, i) = rank
  end do
  call MPI_Allreduce(pin, pout, 5, MPI_2INTEGER, MPI_MINLOC, MPI_COMM_WORLD, ierr)
  do i = 1, 5
    want = -1
    do r = nprocs - 1, 0, -1
      if (want < 0) then
        want = r
      else if (mod(r * 7 + i, 3) <= mod(want * 7 + i, 3)) then
        want = r
      end if
    end do
    if (pout(1, i) /= mod(want * 7 + i, 3) .or. pout(2, i) /= want) fails = fails + 1
  end do

  call MPI_Reduce(fails, total, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  call MPI_Bcast(total, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (total == 0) then
      write (*, '(a)') 'pmpi_check_f: all checks passed'
    else
      write (*, '(a,i0,a)') 'pmpi_check_f: ', total, ' checks failed'
    end if
  end if
  deallocate (big, part, gath)
  call MPI_Finalize(ierr)
  if (total /= 0) stop 1
end program pmpi_check_f
